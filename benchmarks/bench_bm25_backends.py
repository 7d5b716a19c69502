#!/usr/bin/env python3
"""BM25 backends on SciFact: rank-bm25 vs bm25s behind ragopt's one interface, same k1/b and tokenizer.

    python benchmarks/bench_bm25_backends.py [--dataset ../shared/data/scifact] [--rounds 3] [--k 100] [--json]

Builds `BM25Index` with each backend over the corpus (title + text, one chunk per document, as
`ragopt eval --retriever bm25` indexes it), runs every test query through `BM25Index.search` (the same call
the pipeline makes), and prints per-query latency p50/p95 of each backend, their ratio (rank_bm25 / bm25s),
nDCG@10 and Recall@100 of each (ragopt.eval.metrics), and how many queries get the identical top-10.
Queries alternate between the backends, one query at a time, so that machine noise hits both alike; each
query's latency is its median over `--rounds` rounds. BLAS/OpenMP threads are pinned to 1.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy is imported: one thread, like one request

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from ragopt.config import BM25Config  # noqa: E402
from ragopt.data import EvalSet  # noqa: E402
from ragopt.data.beir import load_beir  # noqa: E402
from ragopt.errors import InputError  # noqa: E402
from ragopt.eval.metrics import evaluate_run, mean  # noqa: E402
from ragopt.backends.bm25 import BM25Index  # noqa: E402
from ragopt.trace import percentiles  # noqa: E402
from ragopt.types import Chunk  # noqa: E402

DEFAULT_DATASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
BACKENDS = ("rank_bm25", "bm25s")
Hits = list[list[tuple[int, float]]]  # per query: (document position, score) of each hit


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="a BEIR folder (default: ../shared/data/scifact)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--k", type=int, default=100, help="hits per query (default 100, as ragopt eval)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per query; the median is kept")
    ap.add_argument("--k1", type=float, default=BM25Config().k1)
    ap.add_argument("--b", type=float, default=BM25Config().b)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return ap.parse_args()


def load_evalset(args: argparse.Namespace) -> EvalSet | None:
    """The BEIR split, or None after saying on stderr why it cannot be read."""
    if not (args.dataset / "corpus.jsonl").exists():
        print(f"bench_bm25_backends: dataset not found: {args.dataset} (expected a BEIR folder with corpus.jsonl; "
              "SciFact lives in ../shared/data/scifact beside the checkout)", file=sys.stderr)
        return None
    try:
        return load_beir(args.dataset, split=args.split)
    except InputError as exc:
        print(f"bench_bm25_backends: {exc}", file=sys.stderr)
        return None


def build_indexes(texts: list[str], args: argparse.Namespace) -> tuple[dict[str, BM25Index], dict[str, float]]:
    """One index per backend over the same texts, and the seconds each build took."""
    indexes: dict[str, BM25Index] = {}
    build_s: dict[str, float] = {}
    for name in BACKENDS:
        t0 = time.perf_counter()
        indexes[name] = BM25Index(texts, BM25Config(backend=name, k1=args.k1, b=args.b))  # type: ignore[arg-type]
        build_s[name] = time.perf_counter() - t0
    return indexes, build_s


def time_queries(indexes: dict[str, BM25Index], queries: list[str], k: int, rounds: int) -> tuple[dict[str, np.ndarray], dict[str, Hits]]:
    """Per backend: the ms of every (round, query), and the hits of the first round."""
    for name in BACKENDS:  # warm-up: first calls pay for lazy imports and caches
        for text in queries[:5]:
            indexes[name].search(text, k)

    timings = {name: np.zeros((rounds, len(queries))) for name in BACKENDS}
    results: dict[str, Hits] = {name: [] for name in BACKENDS}
    for r in range(rounds):
        order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]
        for i, text in enumerate(queries):
            for name in order:
                t0 = time.perf_counter()
                found = indexes[name].search(text, k)
                timings[name][r, i] = (time.perf_counter() - t0) * 1000
                if r == 0:
                    results[name].append(found)
    return timings, results


def print_table(out: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"{out['dataset']}: {out['n_documents']} documents, {out['n_queries']} queries, top-{args.k}, "
          f"k1={args.k1} b={args.b}, median of {args.rounds} rounds per query, 1 thread")
    print(f"  {'backend':<10} {'p50 ms':>9} {'p95 ms':>9} {'build s':>8} {'nDCG@10':>8} {'R@100':>7}")
    for name in BACKENDS:
        s = out["backends"][name]
        print(f"  {name:<10} {s['p50_ms']:>9.3f} {s['p95_ms']:>9.3f} {s['build_s']:>8.2f} {s['ndcg@10']:>8.4f} {s['recall@100']:>7.4f}")
    print(f"  ratio rank_bm25 / bm25s: p50 {out['ratio_p50']:.1f}x, p95 {out['ratio_p95']:.1f}x")
    print(f"  identical top-10: {out['identical_top10']} of {out['n_queries']} queries")


def main() -> int:
    args = parse_args()
    evalset = load_evalset(args)
    if evalset is None:
        return 2
    texts = [Chunk(id=d.id, doc_id=d.id, start=0, end=len(d.text), text=d.text, title=d.title).indexed_text for d in evalset.documents]
    doc_ids = [d.id for d in evalset.documents]
    queries = [q.query.text for q in evalset.queries]
    qids = [q.query.id for q in evalset.queries]
    qrels = {q.query.id: q.relevance for q in evalset.queries}

    indexes, build_s = build_indexes(texts, args)
    timings, results = time_queries(indexes, queries, args.k, args.rounds)

    out: dict[str, object] = {
        "dataset": evalset.name, "n_documents": len(texts), "n_queries": len(queries), "k": args.k,
        "k1": args.k1, "b": args.b, "rounds": args.rounds, "python": platform.python_version(), "backends": {},
    }  # fmt: skip
    for name in BACKENDS:
        per_query_ms = np.median(timings[name], axis=0)
        run = {qid: [doc_ids[i] for i, _ in found] for qid, found in zip(qids, results[name])}
        scores = evaluate_run(run, qrels, ["ndcg@10", "recall@100"], query_ids=qids)
        lat = percentiles(per_query_ms.tolist())
        out["backends"][name] = {  # type: ignore[index]
            "p50_ms": lat["p50"], "p95_ms": lat["p95"], "mean_ms": lat["mean"], "build_s": build_s[name],
            "ndcg@10": mean(scores["ndcg@10"]), "recall@100": mean(scores["recall@100"]),
        }  # fmt: skip
    b = out["backends"]  # type: ignore[assignment]
    out["ratio_p50"] = b["rank_bm25"]["p50_ms"] / b["bm25s"]["p50_ms"]  # type: ignore[index]
    out["ratio_p95"] = b["rank_bm25"]["p95_ms"] / b["bm25s"]["p95_ms"]  # type: ignore[index]
    same = sum(
        [i for i, _ in x[:10]] == [i for i, _ in y[:10]] for x, y in zip(results["rank_bm25"], results["bm25s"])
    )
    out["identical_top10"] = same

    if args.json:
        print(json.dumps(out))
    else:
        print_table(out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
