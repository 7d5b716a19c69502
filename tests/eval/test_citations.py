import pytest

from ragopt.data import Evidence
from ragopt.eval.citations import aggregate, citation_scores
from ragopt.types import Answer, Citation


def _answer(*cites):
    return Answer(text="x", citations=list(cites))


def test_all_correct():
    a = _answer(Citation(marker=1, chunk_id="c1", doc_id="d1"), Citation(marker=2, chunk_id="c2", doc_id="d2"))
    s = citation_scores(a, ["d1", "d2"])
    assert (s.valid_share, s.precision, s.recall, s.f1) == (1.0, 1.0, 1.0, 1.0)


def test_mixed_invalid_wrong_and_repeated():
    a = _answer(
        Citation(marker=1, chunk_id="c1", doc_id="d1"),
        Citation(marker=1, chunk_id="c1", doc_id="d1"),  # repeated: the document counts once
        Citation(marker=3, chunk_id="c3", doc_id="d9"),  # a provided passage, but not gold
        Citation(marker=7, valid=False),  # no passage 7 was given
    )
    s = citation_scores(a, [Evidence(doc_id="d1", start=0, end=5), Evidence(doc_id="d2")])
    assert s.n_citations == 4 and s.n_valid == 3
    assert s.valid_share == pytest.approx(3 / 4)
    assert s.cited_docs == ["d1", "d9"]
    assert s.precision == pytest.approx(1 / 2)
    assert s.recall == pytest.approx(1 / 2)
    assert s.f1 == pytest.approx(0.5)


def test_undefined_scores_are_none_and_skipped_by_aggregate():
    none = citation_scores(_answer(), ["d1"])
    assert none.valid_share is None and none.precision is None and none.recall == 0.0
    no_gold = citation_scores(_answer(Citation(marker=1, chunk_id="c", doc_id="d1")), [])
    assert no_gold.recall is None and no_gold.precision == 0.0
    good = citation_scores(_answer(Citation(marker=1, chunk_id="c", doc_id="d1")), ["d1"])
    agg = aggregate([none, no_gold, good])
    assert agg["citation_valid_share"] == 1.0
    assert agg["citation_precision"] == pytest.approx(0.5)
    assert agg["citation_recall"] == pytest.approx(0.5)
    assert agg["answers_with_citations"] == pytest.approx(2 / 3)
    assert aggregate([])["citation_recall"] is None
