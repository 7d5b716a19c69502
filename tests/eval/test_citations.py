import pytest

from ragopt.data import Evidence
from ragopt.eval.citations import aggregate, score_answer_citations, first_passage_floor
from ragopt.types import Answer, Citation


def _answer(*cites):
    return Answer(text="x", citations=list(cites))


def test_all_correct():
    a = _answer(Citation(marker=1, chunk_id="c1", doc_id="d1"), Citation(marker=2, chunk_id="c2", doc_id="d2"))
    s = score_answer_citations(a, ["d1", "d2"])
    assert (s.valid_share, s.precision, s.recall, s.f1) == (1.0, 1.0, 1.0, 1.0)


def test_mixed_invalid_wrong_and_repeated():
    a = _answer(
        Citation(marker=1, chunk_id="c1", doc_id="d1"),
        Citation(marker=1, chunk_id="c1", doc_id="d1"),  # repeated: the document counts once
        Citation(marker=3, chunk_id="c3", doc_id="d9"),  # a provided passage, but not gold
        Citation(marker=7, valid=False),  # no passage 7 was given
    )
    s = score_answer_citations(a, [Evidence(doc_id="d1", start=0, end=5), Evidence(doc_id="d2")])
    assert s.n_citations == 4 and s.n_valid == 3
    assert s.valid_share == pytest.approx(3 / 4)
    assert s.cited_docs == ["d1", "d9"]
    assert s.precision == pytest.approx(1 / 2)
    assert s.recall == pytest.approx(1 / 2)
    assert s.f1 == pytest.approx(0.5)


def test_undefined_scores_are_none_and_skipped_by_aggregate():
    none = score_answer_citations(_answer(), ["d1"])
    assert none.valid_share is None and none.precision is None and none.recall == 0.0
    no_gold = score_answer_citations(_answer(Citation(marker=1, chunk_id="c", doc_id="d1")), [])
    assert no_gold.recall is None and no_gold.precision == 0.0
    good = score_answer_citations(_answer(Citation(marker=1, chunk_id="c", doc_id="d1")), ["d1"])
    agg = aggregate([none, no_gold, good])
    assert agg["citation_valid_share"] == 1.0
    assert agg["citation_precision"] == pytest.approx(0.5)
    assert agg["citation_recall"] == pytest.approx(0.5)
    assert agg["answers_with_citations"] == pytest.approx(2 / 3)
    assert aggregate([])["citation_recall"] is None


def _chunk(cid: str, doc: str, start: int, end: int):
    from ragopt.types import Chunk

    return Chunk(id=cid, doc_id=doc, start=start, end=end, text="x" * (end - start))


# d1 is cut into three 100-char chunks; the gold evidence is d1[120:140] and the whole of d2
SPAN_CHUNKS = [_chunk("a", "d1", 0, 100), _chunk("b", "d1", 100, 200), _chunk("c", "d1", 200, 300), _chunk("e", "d2", 0, 50)]
SPAN_GOLD = [Evidence(doc_id="d1", start=120, end=140), Evidence(doc_id="d2")]


def _cite(*chunks):
    return _answer(*(Citation(marker=i + 1, chunk_id=c.id, doc_id=c.doc_id) for i, c in enumerate(chunks)))


def test_span_level_counts_only_chunks_that_overlap_the_evidence():
    a, b, c, e = SPAN_CHUNKS
    wrong_part = score_answer_citations(_cite(a, c), SPAN_GOLD, SPAN_CHUNKS)
    assert wrong_part.precision == 1.0  # the right document, so document level calls it perfect
    assert wrong_part.span_precision == 0.0 and wrong_part.span_recall == 0.0
    mixed = score_answer_citations(_cite(a, b, e), SPAN_GOLD, {x.id: x for x in SPAN_CHUNKS})
    assert mixed.span_precision == pytest.approx(2 / 3) and mixed.span_recall == 1.0
    assert score_answer_citations(_cite(b), SPAN_GOLD).span_precision is None  # chunks not given: no span level


def test_span_boundaries_are_half_open():
    touching = _chunk("t", "d1", 140, 160)  # starts where the evidence ends
    assert score_answer_citations(_cite(touching), SPAN_GOLD, [touching]).span_precision == 0.0


def test_first_passage_floor():
    a, b, _, e = SPAN_CHUNKS
    right = first_passage_floor(b, SPAN_GOLD)
    assert (right.span_precision, right.span_recall, right.precision, right.recall) == (1.0, 0.5, 1.0, 0.5)
    wrong = first_passage_floor(a, SPAN_GOLD)
    assert (wrong.span_precision, wrong.precision) == (0.0, 1.0)
    assert first_passage_floor(None, SPAN_GOLD).span_precision is None
    agg = aggregate([right, wrong])
    assert agg["citation_span_precision"] == 0.5 and agg["citation_span_recall"] == 0.25
