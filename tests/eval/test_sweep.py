"""The sweep engine against the eval runner: the same numbers, TopK truncation equal to a re-run at that K,
and a warm re-run served from caches (no model load, no embedding)."""

from __future__ import annotations

from typing import Any

import pytest

from fixtures.tiny_corpus import write_beir

from ragopt.config import ChunkerConfig, FusionConfig, RetrievalConfig
from ragopt.data.beir import load_beir
from ragopt.eval import metrics as M
from ragopt.eval.runner import chunk_depth, run_queries
from ragopt.eval.sweep import SweepConfig, run_sweep
from ragopt.index import build_index, make_embedder
from ragopt.stages import embedding

CONFIG = SweepConfig(chunk_sizes=["whole", 24], chunk_overlaps=[4], retrievers=["dense", "bm25", "hybrid"], top_k=[1, 3, 10])


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sweep")
    evalset = load_beir(write_beir(root / "tiny"))
    ws = root / "ws"
    outcome = run_sweep(evalset, CONFIG, ws, progress=False)
    return {"evalset": evalset, "ws": ws, "outcome": outcome, "trials": {t.id: t for t in outcome.results.trials}}


def direct_metrics(swept: dict[str, Any], chunker: ChunkerConfig, config: RetrievalConfig, k: int, names: list[str]) -> dict[str, float]:
    """Retrieval run by the eval runner at depth k, scored at document level."""
    evalset, ws = swept["evalset"], swept["ws"]
    embedder = make_embedder(ws)
    index = build_index(evalset.documents, chunker, embedder, ws, progress=False).index
    runs = run_queries(evalset, index, embedder, config, k, progress=False)
    run = {r.query_id: M.doc_ranking(h.chunk.doc_id for h in r.hits) for r in runs}
    qrels = {q.query.id: q.relevance for q in evalset.queries}
    per_query = M.evaluate_run(run, qrels, names, query_ids=[q.query.id for q in evalset.queries])
    return {n: M.mean(v) for n, v in per_query.items()}  # type: ignore[misc]


def test_trials_cover_the_search_space(swept: dict[str, Any]) -> None:
    trials = swept["trials"]
    assert len(trials) == 2 * 3 * 3
    assert {"whole_dense_k10", "c24-o4_bm25_k3", "whole_hybrid-rrf_k1"} <= set(trials)
    assert all(t.costs.p50_ms > 0 for t in trials.values())


def test_whole_document_dense_ndcg_equals_the_eval_runner(swept: dict[str, Any]) -> None:
    evalset, ws = swept["evalset"], swept["ws"]
    embedder = make_embedder(ws)
    index = build_index(evalset.documents, ChunkerConfig(mode="whole"), embedder, ws, progress=False).index
    runs = run_queries(evalset, index, embedder, RetrievalConfig(retriever="dense"), chunk_depth(index, 100), progress=False)
    run = {r.query_id: [d for d, _ in r.doc_scores(100)] for r in runs}
    qrels = {q.query.id: q.relevance for q in evalset.queries}
    per_query = M.evaluate_run(run, qrels, ["ndcg@10", "recall@10"], query_ids=[q.query.id for q in evalset.queries])
    trial = swept["trials"]["whole_dense_k10"]
    assert trial.metrics["ndcg@10"] == pytest.approx(M.mean(per_query["ndcg@10"]), abs=1e-12)
    assert trial.metrics["recall@10"] == pytest.approx(M.mean(per_query["recall@10"]), abs=1e-12)
    assert trial.per_query["ndcg@10"] == pytest.approx(per_query["ndcg@10"], abs=1e-12)
    assert 0.5 < trial.metrics["ndcg@10"] <= 1.0


CASES = [
    (ChunkerConfig(mode="whole"), RetrievalConfig(retriever="dense"), "whole_dense"),
    (ChunkerConfig(mode="whole"), RetrievalConfig(retriever="bm25"), "whole_bm25"),
    (ChunkerConfig(mode="whole"), RetrievalConfig(retriever="hybrid", fusion=FusionConfig(depth=100)), "whole_hybrid-rrf"),
    (ChunkerConfig(mode="tokens", size=24, overlap=4), RetrievalConfig(retriever="dense"), "c24-o4_dense"),
    (ChunkerConfig(mode="tokens", size=24, overlap=4), RetrievalConfig(retriever="hybrid", fusion=FusionConfig(depth=100)), "c24-o4_hybrid-rrf"),
]


@pytest.mark.parametrize(("chunker", "config", "prefix"), CASES, ids=[c[2] for c in CASES])
@pytest.mark.parametrize("k", [1, 3])
def test_topk_truncation_equals_a_rerun_at_that_k(swept: dict[str, Any], chunker: ChunkerConfig, config: RetrievalConfig, prefix: str, k: int) -> None:
    trial = swept["trials"][f"{prefix}_k{k}"]
    names = [n for n in trial.metrics if n.split("@")[0] in ("recall", "ndcg", "mrr", "precision", "hit")]
    assert f"recall@{k}" in names and "ndcg@10" in names
    direct = direct_metrics(swept, chunker, config, k, names)
    for name in names:
        assert trial.metrics[name] == pytest.approx(direct[name], abs=1e-12), name


def test_a_second_sweep_is_served_from_caches(swept: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def no_model(path: str) -> None:  # a fault on purpose: any model load or embedding fails the test
        raise AssertionError(f"the warm sweep loaded the model: {path}")

    monkeypatch.setattr(embedding, "_load", no_model)
    again = run_sweep(swept["evalset"], CONFIG, swept["ws"], progress=False)
    err = capsys.readouterr().err
    assert err.count("reused") == 2 and "embedded" not in err  # both indexes reused, nothing embedded
    first = {t.id: t.metrics for t in swept["outcome"].results.trials}
    assert {t.id: t.metrics for t in again.results.trials} == first
    assert again.seconds < swept["outcome"].seconds
    assert all(t.costs.latency_cached for t in again.results.trials)
    assert not any(t.costs.latency_cached for t in swept["outcome"].results.trials)


def test_remeasure_runs_retrieval_again_with_the_same_rankings(swept: dict[str, Any], tmp_path: Any) -> None:
    again = run_sweep(swept["evalset"], CONFIG, swept["ws"], progress=False, remeasure=True, runs_dir=tmp_path)
    assert not any(t.costs.latency_cached for t in again.results.trials)
    first = {t.id: t.metrics for t in swept["outcome"].results.trials}
    assert {t.id: t.metrics for t in again.results.trials} == first
    # every trial's ranking as a TREC run: `qid Q0 docid rank score tag`, at most top_k documents a query
    trial = again.results.trial("whole_bm25_k3")
    rows = [line.split() for line in (tmp_path / "whole_bm25_k3.trec").read_text().splitlines()]
    assert len(list(tmp_path.glob("*.trec"))) == len(again.results.trials)
    assert rows and all(len(r) == 6 and r[1] == "Q0" and r[5] == trial.id for r in rows)
    per_query: dict[str, list[int]] = {}
    for qid, _, _, rank, _, _ in rows:
        per_query.setdefault(qid, []).append(int(rank))
    assert all(ranks == list(range(1, len(ranks) + 1)) and len(ranks) <= 3 for ranks in per_query.values())


def test_each_overlap_is_tried_with_each_size_below_it() -> None:
    config = SweepConfig(chunk_sizes=[16, 64, "whole"], chunk_overlaps=[0, 32])
    assert [c.label for c in config.chunkers()] == ["16/0", "64/0", "64/32", "whole"]
