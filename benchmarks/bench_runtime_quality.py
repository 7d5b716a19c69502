#!/usr/bin/env python3
"""Retrieval quality of the embedder's runtimes side by side: nDCG@10 of float32 torch and int8 on the same queries,
with the paired difference, its bootstrap interval and how many queries moved each way.

    python benchmarks/bench_runtime_quality.py [--dataset ../shared/data/scifact] [--retrievers dense,hybrid]
        [--runtimes torch,onnx-int8] [--workspaces DIR] [--json]

Each runtime gets its own workspace (DIR/RUNTIME, kept when --workspaces is given, so a re-run embeds nothing) and
runs `ragopt eval --retriever R --embedder-runtime RUNTIME --save-run FILE` as a user would, whole documents. The
bench scores every query of each saved run with ragopt's own nDCG@10 (checked against the figure eval printed),
pairs each runtime with torch query by query, and prints the mean difference with its 95% paired bootstrap interval
(ragopt.eval.bootstrap, seed 0) and the queries whose nDCG@10 rose, fell or stayed. An interval that holds zero
says the runtimes differ by no more than re-drawing the queries would.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ragopt.config import EMBEDDER_RUNTIMES
from ragopt.data.beir import load_beir
from ragopt.eval.bootstrap import paired_bootstrap_ci
from ragopt.eval.metrics import ndcg_at_k

DEFAULT_DATASET = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
RETRIEVERS = ("dense", "hybrid")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="a BEIR folder (default: ../shared/data/scifact)")
    ap.add_argument("--retrievers", default=",".join(RETRIEVERS), help="comma-separated (default dense,hybrid)")
    ap.add_argument("--runtimes", default=",".join(EMBEDDER_RUNTIMES), help="comma-separated; torch is the baseline")
    ap.add_argument("--workspaces", type=Path, help="keep each runtime's workspace here (default: a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    args.runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    args.retrievers = [r.strip() for r in args.retrievers.split(",") if r.strip()]
    if "torch" not in args.runtimes or set(args.runtimes) - set(EMBEDDER_RUNTIMES):
        ap.error(f"--runtimes: a subset of {','.join(EMBEDDER_RUNTIMES)} with torch (the baseline)")
    if not args.retrievers or set(args.retrievers) - set(RETRIEVERS):
        ap.error(f"--retrievers: a subset of {','.join(RETRIEVERS)}")
    if not (args.dataset / "corpus.jsonl").exists():
        ap.error(f"--dataset: {args.dataset} has no corpus.jsonl")
    return args


def run_eval(dataset: Path, workspace: Path, runtime: str, retriever: str, run_file: Path) -> float:
    """`ragopt eval` of one runtime and retriever, its ranking saved; the nDCG@10 it printed."""
    command = [sys.executable, "-m", "ragopt", "--workspace", str(workspace), "eval", "--dataset", str(dataset),
               "--retriever", retriever, "--embedder-runtime", runtime, "--json", "--save-run", str(run_file)]
    print(f"{runtime} {retriever}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return float(json.loads(done.stdout)["metrics"]["ndcg@10"])


def per_query_ndcg(run_file: Path, relevance: dict[str, dict[str, int]]) -> dict[str, float]:
    """nDCG@10 of each query of a TREC run file (query, Q0, document, rank, score, tag), in its rank order."""
    ranked: dict[str, list[tuple[int, str]]] = {qid: [] for qid in relevance}
    for line in run_file.read_text().splitlines():
        qid, _, doc_id, rank, *_ = line.split()
        ranked[qid].append((int(rank), doc_id))
    return {qid: ndcg_at_k([d for _, d in sorted(ranked[qid])], relevance[qid], 10) for qid in sorted(relevance)}


def compare(baseline: dict[str, float], other: dict[str, float]) -> dict[str, Any]:
    ids = sorted(baseline)
    ci = paired_bootstrap_ci([other[q] for q in ids], [baseline[q] for q in ids])
    moved = [other[q] - baseline[q] for q in ids]
    return {"difference": ci.mean_diff, "ci95": [ci.low, ci.high], "rose": sum(d > 1e-12 for d in moved),
            "fell": sum(d < -1e-12 for d in moved), "queries": len(ids)}


def main() -> int:
    args = parse_args()
    relevance = {q.query.id: q.relevance for q in load_beir(args.dataset).queries}
    with tempfile.TemporaryDirectory(prefix="ragopt-bench-quality-") as scratch:
        root = args.workspaces or Path(scratch)
        scores: dict[str, dict[str, dict[str, float]]] = {}
        out: dict[str, Any] = {"dataset": str(args.dataset), "queries": len(relevance), "retrievers": {}}
        for retriever in args.retrievers:
            rows = out["retrievers"][retriever] = {}
            for runtime in args.runtimes:
                run_file = root / f"run-{runtime}-{retriever}.txt"
                printed = run_eval(args.dataset, root / runtime, runtime, retriever, run_file)
                scores.setdefault(retriever, {})[runtime] = per_query_ndcg(run_file, relevance)
                mean = sum(scores[retriever][runtime].values()) / len(relevance)
                if abs(mean - printed) > 1e-9:
                    raise SystemExit(f"{runtime} {retriever}: the run's nDCG@10 {mean:.6f} is not eval's {printed:.6f}")
                rows[runtime] = {"ndcg@10": mean}
            for runtime in args.runtimes:
                if runtime != "torch":
                    rows[runtime] |= compare(scores[retriever]["torch"], scores[retriever][runtime])
    print(json.dumps(out, indent=2) if args.json else table(out))
    return 0


def table(out: dict[str, Any]) -> str:
    lines = [f"{out['dataset']}: {out['queries']} queries, nDCG@10 per runtime; difference to torch, paired"]
    lines.append(f"{'retriever':<10}{'runtime':<12}{'nDCG@10':>9}{'diff':>9}  {'95% interval':<20}{'rose':>5}{'fell':>5}")
    for retriever, rows in out["retrievers"].items():
        for runtime, row in rows.items():
            extra = (f"{row['difference']:>+9.4f}  [{row['ci95'][0]:+.4f}, {row['ci95'][1]:+.4f}]    "
                     f"{row['rose']:>5}{row['fell']:>5}") if "difference" in row else ""
            lines.append(f"{retriever:<10}{runtime:<12}{row['ndcg@10']:>9.4f}{extra}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
