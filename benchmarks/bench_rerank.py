#!/usr/bin/env python3
"""Embedders x rerankers on a BEIR split: nDCG@10 and the latency a rerank stage adds, per depth.

    python benchmarks/bench_rerank.py --workspace WS [--dataset ../shared/data/scifact] [--split test]
        [--embedder base] [--embedder PATH ...] [--depths 20,50,100] [--maxsim-fusion rrf] [--maxsim-queries N]
        [--reranker PATH] [--reranker-fusion rrf] [--reranker-queries 50] [--json]

For each embedder (`base` is the packaged all-MiniLM-L6-v2; a path is e.g. what `ragopt train-embedder`
saved) it runs dense and hybrid RRF retrieval through `ragopt.eval.runner.run_queries`, the code behind
`ragopt eval` (100 documents per query), then reranks each query's hybrid ranking with the max-sim stage
and, given `--reranker`, the cross-encoder stage, at every depth, through `Pipeline.run_state`. The added
latency is the rerank span's p50/p95 from the traces. Max-sim's sentence vectors are embedded (and cached)
before the timed runs, as an index build would: that one-time cost is reported apart. A cross-encoder costs
a forward pass per candidate, so it runs on the first `--reranker-queries` queries (max-sim on the first
`--maxsim-queries`, when given), with the hybrid baseline on the same queries beside it. Every row prints its ratio to the first embedder's hybrid nDCG@10.
One torch thread, as in the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ragopt.backends.embeddings import Embedder
from ragopt.config import ChunkerConfig, EmbedderConfig, FusionConfig, RetrievalConfig
from ragopt.data import EvalSet, load_evalset
from ragopt.errors import InputError
from ragopt.eval.metrics import evaluate_run, mean
from ragopt.eval.runner import best_per_doc, chunk_depth, run_queries
from ragopt.index import Index, build_index, make_embedder
from ragopt.pipeline import Pipeline, RequestState
from ragopt.resources import Resources
from ragopt.trace import percentiles
from ragopt.types import Hit

DEFAULT_DATASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
METRICS = ["ndcg@10", "recall@100"]
DOCS = 100


def scores(evalset: EvalSet, rankings: dict[str, list[Hit]]) -> dict[str, float]:
    doc_run = {qid: [d for d, _ in best_per_doc(((h.chunk.doc_id, h.score) for h in hits), DOCS)] for qid, hits in rankings.items()}
    qrels = {q.query.id: q.relevance for q in evalset.queries if q.query.id in rankings}
    per_query = evaluate_run(doc_run, qrels, METRICS, query_ids=list(rankings))
    return {m: round(mean(v), 4) for m, v in per_query.items()}


def rerank_all(evalset: EvalSet, stage: Any, base: dict[str, list[Hit]], limit: int | None) -> tuple[dict[str, list[Hit]], list[float]]:
    """Each query's hybrid ranking through the stage alone; (new rankings, the stage's span ms per query)."""
    pipeline = Pipeline([stage], inputs=("query", "hits"))
    out, ms = {}, []
    for q in evalset.queries[:limit]:
        result = pipeline.run_state(RequestState(query=q.query, hits=list(base[q.query.id])))
        out[q.query.id] = result.state.hits
        ms.append(result.trace.spans[0].ms)
    return out, ms


def row(label: str, rerank: str, depth: int | None, metrics: dict[str, float], ms: list[float] | None, n: int) -> dict[str, Any]:
    lat = percentiles(ms) if ms else {}
    return {
        "embedder": label, "rerank": rerank, "depth": depth, "n_queries": n, **metrics,
        "added_p50_ms": round(lat["p50"], 2) if lat else None, "added_p95_ms": round(lat["p95"], 2) if lat else None,
    }


def log_row(r: dict[str, Any]) -> None:
    print(json.dumps(r), file=sys.stderr, flush=True)


def retrieval_rows(label: str, evalset: EvalSet, index: Index, embedder: Embedder, no_dense: bool) -> tuple[list[dict[str, Any]], dict[str, list[Hit]]]:
    """Rows for dense (unless no_dense) and hybrid RRF retrieval, and the hybrid ranking every rerank starts from."""
    depth = chunk_depth(index, DOCS)
    rows: list[dict[str, Any]] = []
    base: dict[str, list[Hit]] = {}
    for retriever in ("hybrid",) if no_dense else ("dense", "hybrid"):
        config = RetrievalConfig(retriever=retriever, fusion=FusionConfig(method="rrf"))
        runs = run_queries(evalset, index, embedder, config, depth, progress=False)
        ranking = {r.query_id: index.hits([(index.positions[c], score) for c, _, _, _, score in r.ranking], retriever) for r in runs}
        rows.append(row(label, f"{retriever} (no rerank)", None, scores(evalset, ranking), None, len(runs)))
        log_row(rows[-1])
        if retriever == "hybrid":
            base = ranking
    return rows, base


def maxsim_rows(label: str, evalset: EvalSet, embedder: Embedder, base: dict[str, list[Hit]], depths: list[int], args: argparse.Namespace,
                notes: dict[str, Any]) -> list[dict[str, Any]]:
    """Max-sim at every depth on the first --maxsim-queries queries (all by default; a hybrid row for that subset
    first), its sentence vectors embedded before the timed runs, their one-time cost noted in `notes`."""
    from ragopt.stages.rerank_maxsim import MaxSimConfig, MaxSimRerank, passage_sentences

    rows = []
    n = args.maxsim_queries
    if n is not None:
        subset = {q.query.id: base[q.query.id] for q in evalset.queries[:n]}
        rows.append(row(label, "hybrid (no rerank)", None, scores(evalset, subset), None, len(subset)))
    t0 = time.perf_counter()
    chunks = {h.chunk.id: h.chunk for q in evalset.queries[:n] for h in base[q.query.id][: max(depths)]}
    texts = [(s, (c.tenant, c.scopes)) for c in chunks.values() for s in passage_sentences(c)]
    warm = embedder.encode([t for t, _ in texts], [o for _, o in texts], progress=not args.json)
    notes[f"{label}.maxsim_sentences"] = {"texts": len(texts), "embedded": warm.cache_misses, "seconds": round(time.perf_counter() - t0, 1)}
    for d in depths:
        stage = MaxSimRerank(embedder, MaxSimConfig(depth=d, fusion=args.maxsim_fusion))
        ranking, ms = rerank_all(evalset, stage, base, n)
        rows.append(row(label, f"maxsim-{args.maxsim_fusion}", d, scores(evalset, ranking), ms, len(ranking)))
        log_row(rows[-1])
    return rows


def cross_encoder_rows(label: str, evalset: EvalSet, base: dict[str, list[Hit]], depths: list[int], args: argparse.Namespace,
                       resources: Resources) -> list[dict[str, Any]]:
    """The --reranker cross-encoder at every depth on the first --reranker-queries queries, after a hybrid row for
    that subset."""
    from ragopt.stages.rerank import CrossEncoderRerank, RerankConfig

    n = args.reranker_queries
    subset = {q.query.id: base[q.query.id] for q in evalset.queries[:n]}
    rows = [row(label, "hybrid (no rerank)", None, scores(evalset, subset), None, len(subset))]
    for d in depths:
        stage = CrossEncoderRerank(RerankConfig(model=args.reranker, depth=d, fusion=args.reranker_fusion), resources)
        stage.model  # load outside the timed spans
        ranking, ms = rerank_all(evalset, stage, base, n)
        rows.append(row(label, f"cross-encoder-{args.reranker_fusion}", d, scores(evalset, ranking), ms, len(ranking)))
        log_row(rows[-1])
    return rows


def embedder_rows(name: str, evalset: EvalSet, depths: list[int], args: argparse.Namespace, resources: Resources,
                  notes: dict[str, Any]) -> list[dict[str, Any]]:
    """One --embedder's rows: retrieval, then each rerank stage asked for; its one-time costs noted in `notes`."""
    label = "base" if name == "base" else Path(name).name
    embedder = make_embedder(args.workspace, EmbedderConfig() if name == "base" else EmbedderConfig(model=name))
    t0 = time.perf_counter()
    report = build_index(evalset.documents, ChunkerConfig(chunker="whole"), embedder, args.workspace)
    notes[f"{label}.index_s"] = round(time.perf_counter() - t0, 1)
    rows, base = retrieval_rows(label, evalset, report.index, embedder, args.no_dense)
    if not args.no_maxsim:
        rows += maxsim_rows(label, evalset, embedder, base, depths, args, notes)
    if args.reranker:
        rows += cross_encoder_rows(label, evalset, base, depths, args, resources)
    return rows


def depth_list(text: str) -> list[int]:
    try:
        depths = [int(d) for d in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if min(depths) < 1:
        raise argparse.ArgumentTypeError(f"depths must be >= 1: {text!r}")
    return depths


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    ap.add_argument("--split", default="test")
    ap.add_argument("--workspace", type=Path, required=True)
    ap.add_argument("--embedder", action="append", help="'base' or a model folder; repeatable (default: base)")
    ap.add_argument("--depths", type=depth_list, default=depth_list("20,50,100"), help="comma-separated positive depths")
    ap.add_argument("--maxsim-fusion", choices=["none", "rrf", "convex"], default="rrf")
    ap.add_argument("--no-dense", action="store_true", help="skip the dense-only row")
    ap.add_argument("--no-maxsim", action="store_true")
    ap.add_argument("--maxsim-queries", type=int, default=None, help="rerank only the first N queries (default: all)")
    ap.add_argument("--reranker", default=None, help="a CrossEncoder folder (e.g. from ragopt train-reranker)")
    ap.add_argument("--reranker-fusion", choices=["none", "rrf", "convex"], default="rrf")
    ap.add_argument("--reranker-queries", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


def print_table(rows: list[dict[str, Any]], notes: dict[str, Any], dataset: str, split: str, ref: float) -> None:
    print(f"{dataset} {split}: ratio = nDCG@10 / first embedder's hybrid nDCG@10 ({ref:.4f})")
    print(f"{'embedder':<28} {'rerank':<22} {'depth':>5} {'queries':>7} {'nDCG@10':>8} {'R@100':>7} {'ratio':>6} {'+p50 ms':>8} {'+p95 ms':>8}")
    for r in rows:
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        print(f"{r['embedder']:<28} {r['rerank']:<22} {r['depth'] or '-':>5} {r['n_queries']:>7} {r['ndcg@10']:>8.4f} "
              f"{r['recall@100']:>7.4f} {r['ratio']:>6.3f} {fmt(r['added_p50_ms']):>8} {fmt(r['added_p95_ms']):>8}")
    for k, v in notes.items():
        print(f"  {k}: {v}")


def main() -> int:
    args = parse_args()

    import torch

    torch.set_num_threads(1)
    try:
        evalset = load_evalset(args.dataset, split=args.split)
        depths = args.depths
        resources = Resources()
        rows: list[dict[str, Any]] = []
        notes: dict[str, Any] = {}
        for name in args.embedder or ["base"]:
            rows += embedder_rows(name, evalset, depths, args, resources, notes)
    except InputError as exc:
        print(f"bench_rerank: {exc}", file=sys.stderr)
        return 2
    ref = next(r["ndcg@10"] for r in rows if r["rerank"] == "hybrid (no rerank)")  # measured in this run
    for r in rows:
        r["ratio"] = round(r["ndcg@10"] / ref, 4)
    if args.json:
        print(json.dumps({"dataset": evalset.name, "split": args.split, "rows": rows, "notes": notes}))
    else:
        print_table(rows, notes, evalset.name, args.split, ref)
    return 0


if __name__ == "__main__":
    sys.exit(main())
