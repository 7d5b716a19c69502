import math
import random
from pathlib import Path

import pytest

from ragopt.data import Evidence
from ragopt.errors import InputError
from ragopt.eval.metrics import (
    doc_ranking,
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
    # dcg = 1/log2(3) + 1/log2(5); ideal (3 relevant, k=5) = 1 + 1/log2(3) + 1/2
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 + 1 / math.log2(3) + 0.5
    assert ndcg_at_k(ranking, qrels, 5) == pytest.approx(dcg / idcg)
    # ideal truncated at k: k=2 -> ideal = 1 + 1/log2(3); dcg@2 = 1/log2(3)
    assert ndcg_at_k(ranking, qrels, 2) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def test_hand_computed_graded_ndcg():
    ranking = ["b", "a", "c"]
    qrels = {"a": 3, "b": 1, "c": 2}
    dcg = 1 / 1 + 3 / math.log2(3) + 2 / 2
    idcg = 3 / 1 + 2 / math.log2(3) + 1 / 2
    assert ndcg_at_k(ranking, qrels, 3) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(["a", "c", "b"], qrels, 3) == pytest.approx(1.0)


def test_no_relevant_scores_zero():
    for fn in (recall_at_k, precision_at_k, hit_at_k, mrr_at_k, ndcg_at_k):
        assert fn(["a", "b"], {}, 5) == 0.0
        assert fn(["a", "b"], {"a": 0}, 5) == 0.0
        assert fn([], {"a": 1}, 5) == 0.0


def test_bad_k():
    with pytest.raises(ValueError):
        recall_at_k(["a"], {"a": 1}, 0)


def test_span_recall():
    ev = [Evidence(doc_id="d1", start=100, end=150), Evidence(doc_id="d1", start=400, end=420), Evidence(doc_id="d2")]
    chunks = [("d1", 0, 120), ("d3", 0, 50), ("d2", 500, 700), ("d1", 380, 400)]
    assert span_recall_at_k(chunks, ev, 1) == pytest.approx(1 / 3)
    assert span_recall_at_k(chunks, ev, 3) == pytest.approx(2 / 3)  # whole-doc evidence d2 hit by any d2 chunk
    assert span_recall_at_k(chunks, ev, 4) == pytest.approx(2 / 3)  # [380,400) touches but does not overlap [400,420)
    assert span_recall_at_k(chunks + [("d1", 410, 411)], ev, 5) == pytest.approx(1.0)
    assert math.isnan(span_recall_at_k(chunks, [], 3))
    out = evaluate_spans({"q": chunks}, {"q": ev, "empty": []}, ks=[1, 3])
    assert out["span_recall@3"][0] == pytest.approx(2 / 3) and math.isnan(out["span_recall@3"][1])
    assert mean(out["span_recall@3"]) == pytest.approx(2 / 3)


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
