#!/usr/bin/env python3
"""BM25 per query, Chinese against English at the same corpus size: CMRC 2018 dev vs SciFact.

    python benchmarks/bench_bm25_languages.py [--docs 848] [--queries 300] [--rounds 3] [--k 100] [--json]

Chinese: the first `--docs` CMRC 2018 dev paragraphs (title + text) and its first `--queries` questions, through
the chinese analyzer (rjieba search mode on Han runs, Chinese stopwords); English: the first `--docs` SciFact
abstracts and its first `--queries` test claims, through the english analyzer (Snowball, stopwords). Each side
is a `BM25Index` (bm25s, ragopt's defaults) searched with `BM25Index.search`, the call the pipeline makes: the
query's analysis, scoring and the total-order top k. The two languages alternate query by query so machine noise
hits both alike; each query's latency is its median over `--rounds` rounds; BLAS threads are pinned to 1.
Printed: p50/p95 per query of each, the ratio Chinese / English, the share of the p50 spent analyzing the
query, index build time and terms per document.
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

import numpy as np  # noqa: E402

from ragopt.backends.bm25 import BM25Index  # noqa: E402
from ragopt.config import BM25Config  # noqa: E402
from ragopt.data import load_evalset  # noqa: E402
from ragopt.errors import InputError  # noqa: E402
from ragopt.trace import percentiles  # noqa: E402
from ragopt.types import Chunk  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SETS = {"chinese": ("cmrc2018_dev", "test"), "english": ("scifact", "test")}


def side(name: str, folder: Path, split: str, n_docs: int, n_queries: int) -> dict:
    evalset = load_evalset(folder, split=split)
    docs = evalset.documents[:n_docs]
    texts = [Chunk(id=d.id, doc_id=d.id, start=0, end=len(d.text), text=d.text, title=d.title).indexed_text for d in docs]
    t0 = time.perf_counter()
    index = BM25Index(texts, BM25Config(analyzer=name))  # type: ignore[arg-type]
    build_s = time.perf_counter() - t0
    terms = float(np.mean([len(index.tokenize(t)) for t in texts]))
    return {"dataset": evalset.name, "index": index, "queries": [q.query.text for q in evalset.queries[:n_queries]],
            "docs": len(docs), "build_s": build_s, "terms_per_doc": terms,
            "chars_per_doc": float(np.mean([len(t) for t in texts]))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="the folder holding cmrc2018_dev and scifact (default: ../shared/data)")
    ap.add_argument("--docs", type=int, default=848, help="documents on each side (default 848: all of CMRC's paragraphs)")
    ap.add_argument("--queries", type=int, default=300, help="queries on each side (default 300: all of SciFact's test claims)")
    ap.add_argument("--k", type=int, default=100, help="hits per query (default 100, as ragopt eval)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per query; the median is kept")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()
    for flag in ("docs", "queries", "k", "rounds"):
        if getattr(args, flag) <= 0:
            print(f"bench_bm25_languages: [--{flag}]: must be positive, got {getattr(args, flag)}", file=sys.stderr)
            return 2
    try:
        sides = {name: side(name, args.data / folder, split, args.docs, args.queries) for name, (folder, split) in SETS.items()}
    except InputError as exc:
        print(f"bench_bm25_languages: {exc}", file=sys.stderr)
        return 2
    n = min(len(s["queries"]) for s in sides.values())
    for s in sides.values():  # warm-up: the first calls pay for lazy imports and the segmenter's dictionary
        for text in s["queries"][:5]:
            s["index"].search(text, args.k)
    search = {name: np.zeros((args.rounds, n)) for name in sides}
    analyze = {name: np.zeros((args.rounds, n)) for name in sides}
    for r in range(args.rounds):
        for i in range(n):
            for name, s in sides.items():  # alternate: noise hits both languages alike
                text, index = s["queries"][i], s["index"]
                t0 = time.perf_counter()
                index.search(text, args.k)
                t1 = time.perf_counter()
                index.tokenize(text)
                search[name][r, i] = (t1 - t0) * 1000
                analyze[name][r, i] = (time.perf_counter() - t1) * 1000
    out: dict = {"python": platform.python_version(), "k": args.k, "rounds": args.rounds, "queries": n, "sides": {}}
    for name, s in sides.items():
        per_query = percentiles(np.median(search[name], axis=0))
        out["sides"][name] = {
            "dataset": s["dataset"], "docs": s["docs"], "chars_per_doc": s["chars_per_doc"], "terms_per_doc": s["terms_per_doc"],
            "build_s": s["build_s"], "p50_ms": per_query["p50"], "p95_ms": per_query["p95"],
            "analyze_p50_ms": percentiles(np.median(analyze[name], axis=0))["p50"],
        }
    zh, en = out["sides"]["chinese"], out["sides"]["english"]
    out["ratio_p50"] = zh["p50_ms"] / en["p50_ms"]
    out["ratio_p95"] = zh["p95_ms"] / en["p95_ms"]
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"BM25 per query (bm25s, top {args.k}, {n} queries each, median of {args.rounds} rounds, 1 thread)")
    print(f"  {'':8} {'dataset':14} {'docs':>5} {'chars/doc':>9} {'terms/doc':>9} {'build s':>8} {'p50 ms':>8} {'p95 ms':>8} {'analyze p50':>11}")
    for name, r in out["sides"].items():
        print(f"  {name:8} {r['dataset']:14} {r['docs']:>5} {r['chars_per_doc']:>9.0f} {r['terms_per_doc']:>9.0f} "
              f"{r['build_s']:>8.2f} {r['p50_ms']:>8.3f} {r['p95_ms']:>8.3f} {r['analyze_p50_ms']:>11.3f}")
    print(f"  Chinese / English: p50 x{out['ratio_p50']:.2f}, p95 x{out['ratio_p95']:.2f} (goal: within 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
