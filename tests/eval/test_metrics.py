import math
import random
from pathlib import Path

import pytest

from ragopt.data import Evidence
from ragopt.errors import InputError
from ragopt.eval.metrics import (
    chars_at_k,
    doc_ranking,
    evaluate_chars,
    evaluate_run,
    evaluate_spans,
    hit_at_k,
    mean,
    mrr_at_k,
    ndcg_at_k,
    parse_metric,
    precision_at_k,
    recall_at_k,
    span_recall_at_k,
)

SCIFACT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "scifact"
KS = (1, 3, 5, 10, 20, 100)
RANX_NAMES = {"recall": "recall", "precision": "precision", "hit": "hit_rate", "mrr": "mrr", "ndcg": "ndcg"}


def test_doc_ranking_keeps_first_occurrence():
    assert doc_ranking(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]
    assert doc_ranking([]) == []


def test_hand_computed_binary():
    ranking = ["x", "a", "y", "b", "z"]
    qrels = {"a": 1, "b": 1, "c": 1, "n": 0}
    assert recall_at_k(ranking, qrels, 1) == 0.0
    assert recall_at_k(ranking, qrels, 2) == pytest.approx(1 / 3)
    assert recall_at_k(ranking, qrels, 5) == pytest.approx(2 / 3)
    assert precision_at_k(ranking, qrels, 4) == pytest.approx(2 / 4)
    assert precision_at_k(ranking, qrels, 10) == pytest.approx(2 / 10)  # denominator k, as trec_eval
    assert hit_at_k(ranking, qrels, 1) == 0.0
    assert hit_at_k(ranking, qrels, 2) == 1.0
    assert mrr_at_k(ranking, qrels, 1) == 0.0
    assert mrr_at_k(ranking, qrels, 10) == pytest.approx(1 / 2)
    assert ndcg_at_k(["a", "b", "c"], qrels, 3) == pytest.approx(1.0)  # every relevant doc first: ideal
    assert ndcg_at_k(["x", "y", "z"], qrels, 3) == 0.0


def test_graded_ndcg_matches_the_published_worked_example():
    # Wikipedia, "Discounted cumulative gain" (gain = grade): six results graded 3, 2, 3, 0, 1, 2 give
    # DCG6 = 6.861; with two more relevant documents (grades 3 and 2) the ideal order 3, 3, 3, 2, 2, 2 gives
    # IDCG6 = 8.740, so nDCG6 = 0.785.
    qrels = {"d1": 3, "d2": 2, "d3": 3, "d4": 0, "d5": 1, "d6": 2, "d7": 3, "d8": 2}
    ranking = ["d1", "d2", "d3", "d4", "d5", "d6"]
    assert ndcg_at_k(ranking, qrels, 6) == pytest.approx(6.861 / 8.740, abs=1e-3)
    assert ndcg_at_k(ranking, qrels, 6) == pytest.approx(0.785, abs=1e-3)
    assert ndcg_at_k(["d1", "d7", "d3", "d2", "d6", "d8"], qrels, 6) == pytest.approx(1.0)


def test_no_relevant_scores_zero():
    for fn in (recall_at_k, precision_at_k, hit_at_k, mrr_at_k, ndcg_at_k):
        assert fn(["a", "b"], {}, 5) == 0.0
        assert fn(["a", "b"], {"a": 0}, 5) == 0.0
        assert fn([], {"a": 1}, 5) == 0.0


def test_bad_k():
    with pytest.raises(ValueError):
        recall_at_k(["a"], {"a": 1}, 0)


def test_span_recall_needs_half_of_a_span_by_default():
    ev = [Evidence(doc_id="d1", start=100, end=150), Evidence(doc_id="d1", start=400, end=420), Evidence(doc_id="d2")]
    chunks = [("d1", 0, 130), ("d3", 0, 50), ("d2", 500, 700), ("d1", 380, 409), ("d1", 409, 411)]
    assert span_recall_at_k(chunks, ev, 1) == pytest.approx(1 / 3)  # 30 of [100,150)'s 50 chars: found
    assert span_recall_at_k(chunks, ev, 3) == pytest.approx(2 / 3)  # whole-doc evidence d2: any d2 chunk
    assert span_recall_at_k(chunks, ev, 4) == pytest.approx(2 / 3)  # 9 of [400,420)'s 20 chars: not yet
    assert span_recall_at_k(chunks, ev, 5) == pytest.approx(1.0)  # two chunks together hold 11 of 20
    assert math.isnan(span_recall_at_k(chunks, [], 3))
    out = evaluate_spans({"q": chunks}, {"q": ev, "empty": []}, ks=[1, 3])
    assert out["span_recall@3"][0] == pytest.approx(2 / 3) and math.isnan(out["span_recall@3"][1])
    assert mean(out["span_recall@3"]) == pytest.approx(2 / 3)


def test_span_recall_a_grazing_chunk_does_not_find_a_span():
    ev = [Evidence(doc_id="d1", start=100, end=150)]
    assert span_recall_at_k([("d1", 149, 300)], ev, 1) == 0.0  # one character of fifty
    assert span_recall_at_k([("d1", 149, 300)], ev, 1, min_coverage=0.02) == 1.0  # one of fifty is 2%
    assert span_recall_at_k([("d1", 0, 125)], ev, 1) == 1.0  # exactly half
    assert span_recall_at_k([("d1", 0, 124)], ev, 1) == 0.0
    assert span_recall_at_k([("d2", 0, 1000)], ev, 1) == 0.0  # another document's chars never count


def test_span_recall_counts_overlapping_chunks_once_and_ignores_chunks_beside_the_span():
    ev = [Evidence(doc_id="d1", start=100, end=150)]
    assert span_recall_at_k([("d1", 100, 120), ("d1", 110, 124)], ev, 2) == 0.0  # 24 distinct chars, not 34
    assert span_recall_at_k([("d1", 200, 300), ("d1", 0, 90), ("d1", 100, 130)], ev, 3) == 1.0
    assert span_recall_at_k([("d1", 200, 300), ("d1", 0, 100), ("d1", 150, 160)], ev, 3) == 0.0  # touching only
    whole = [("d1", 0, 130), ("d1", 130, 150)]
    assert span_recall_at_k(whole, ev, 1, min_coverage=1.0) == 0.0
    assert span_recall_at_k(whole, ev, 2, min_coverage=1.0) == 1.0
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError):
            span_recall_at_k(whole, ev, 2, min_coverage=bad)


def test_chars_metrics_by_hand():
    # evidence: d[10, 20) and d[30, 40), 20 characters. Passages: d[0, 15) holds 5 of them; d[12, 35) holds 8 + 5,
    # 3 of which the first passage holds too (counted once); e[0, 50) is another document's.
    ev = [Evidence(doc_id="d", start=10, end=20), Evidence(doc_id="d", start=30, end=40)]
    passages = [("d", 0, 15), ("d", 12, 35), ("e", 0, 50)]
    assert chars_at_k(passages, ev, 1) == pytest.approx((5 / 20, 5 / 15, 5 / (15 + 15)))
    # covered [10, 20) + [30, 35) = 15; retrieved 15 + 23 = 38 (the overlap [12, 15) counted twice); uncovered 5
    assert chars_at_k(passages, ev, 2) == pytest.approx((15 / 20, 15 / 38, 15 / (38 + 5)))
    assert chars_at_k(passages, ev, 3) == pytest.approx((15 / 20, 15 / 88, 15 / (88 + 5)))
    # overlapping evidence spans count once; no passage: zero, not undefined
    assert chars_at_k([("d", 0, 15)], [*ev, Evidence(doc_id="d", start=15, end=20)], 1)[0] == pytest.approx(5 / 20)
    assert chars_at_k([], ev, 5) == (0.0, 0.0, 0.0)
    # whole-document evidence has no characters to count: undefined
    assert all(math.isnan(x) for x in chars_at_k(passages, [Evidence(doc_id="d")], 3))
    out = evaluate_chars({"q": passages}, {"q": ev, "r": ev}, [2])
    assert out["chars_iou@2"] == pytest.approx([15 / 43, 0.0]) and set(out) == {"chars_recall@2", "chars_precision@2", "chars_iou@2"}
    assert parse_metric("chars_iou@5") == ("chars_iou", 5)


def test_parse_metric_and_errors():
    assert parse_metric("nDCG@10") == ("ndcg", 10)
    assert parse_metric("span_recall@5") == ("span_recall", 5)
    for bad in ("ndcg", "ndcg@0", "map@10", "recall@x"):
        with pytest.raises(InputError) as e:
            parse_metric(bad)
        assert "recall" in str(e.value) and e.value.field == "metric"
    with pytest.raises(InputError):
        evaluate_run({}, {}, ["span_recall@10"])


def test_evaluate_run_alignment_and_dedup():
    qrels = {"q1": {"a": 1}, "q2": {"b": 2}}
    run = {"q2": ["b", "b", "c"], "q3": ["a"]}
    out = evaluate_run(run, qrels, ["recall@1", "precision@2"])
    assert out["recall@1"] == [0.0, 1.0]  # q1 missing from the run: an empty ranking
    assert out["precision@2"] == [0.0, 0.5]  # "b" counted once
    out = evaluate_run(run, qrels, ["hit@1"], query_ids=["q2"])
    assert out == {"hit@1": [1.0]}


def _metric_names():
    return [f"{m}@{k}" for m in RANX_NAMES for k in KS]


def _max_diff_vs_ranx(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> float:
    ranx = pytest.importorskip("ranx")
    qids = list(qrels)
    ours = evaluate_run(run, qrels, _metric_names(), query_ids=qids)
    r_qrels = ranx.Qrels({q: {d: g for d, g in rel.items() if g > 0} for q, rel in qrels.items()})
    r_run = ranx.Run({q: {d: float(len(docs) - i) for i, d in enumerate(docs)} for q, docs in run.items()})
    ranx_metrics = [f"{RANX_NAMES[m]}@{k}" for m in RANX_NAMES for k in KS]
    ranx.evaluate(r_qrels, r_run, ranx_metrics, make_comparable=False)
    worst = 0.0
    for name, rname in zip(_metric_names(), ranx_metrics):
        theirs = r_run.scores[rname]
        for i, qid in enumerate(qids):
            worst = max(worst, abs(ours[name][i] - theirs[qid]))
    return worst


def test_agrees_with_ranx_on_random_graded_run():
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(400)]
    qrels, run = {}, {}
    for q in range(50):
        qid = f"q{q}"
        rel = rng.sample(docs, rng.randint(1, 12))
        qrels[qid] = {d: rng.choice([1, 1, 2, 3]) for d in rel}
        # a realistic ranking: relevant docs scattered among distractors, some beyond rank 100
        pool = rng.sample(docs, rng.randint(20, 150))
        ranking = doc_ranking(pool + rel)
        rng.shuffle(ranking)
        run[qid] = ranking
    diff = _max_diff_vs_ranx(run, qrels)
    print(f"max |ours - ranx| on random graded run: {diff:.3g}")
    assert diff <= 1e-6


@pytest.mark.slow
@pytest.mark.skipif(not (SCIFACT / "qrels" / "test.tsv").exists(), reason="../shared/data/scifact not present")
def test_agrees_with_ranx_on_scifact_qrels():
    def read(split):
        out: dict[str, dict[str, int]] = {}
        lines = (SCIFACT / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]
        for line in lines:
            qid, doc_id, score = line.strip().split("\t")
            out.setdefault(qid, {})[doc_id] = int(score)
        return out

    qrels = read("test")
    pool = sorted({d for rel in (*qrels.values(), *read("train").values()) for d in rel})
    rng = random.Random(11)
    run = {}
    for qid, rel in qrels.items():
        # a retriever-like ranking: the relevant docs placed at random depths among distractors
        ranking = rng.sample(pool, 100)
        for doc_id in rel:
            if doc_id not in ranking and rng.random() < 0.85:
                ranking.insert(rng.randint(0, 30), doc_id)
        run[qid] = doc_ranking(ranking)
    assert len(qrels) == 300
    diff = _max_diff_vs_ranx(run, qrels)
    print(f"max |ours - ranx| on scifact qrels: {diff:.3g}")
    assert diff <= 1e-6
