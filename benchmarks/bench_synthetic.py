"""The trust check: does a generated evaluation set rank pipelines as people's questions do?

For each dataset (SciFact, HotpotQA dev500 from ../shared/data), a set is generated from the corpus alone
(`ragopt synth`'s generator and filters; the real queries are never read to generate), and the same sweep grid
(chunk size x retriever x fusion, one top_k) runs on the generated set and on the human-labelled queries. Per
dataset and generator it prints: Kendall tau (tau-b) between the two rankings of configurations by nDCG@10
(all at one top_k, never across K, which would inflate it); the regret of the configuration the generated set
selects (best by its nDCG@10, ties by id), as the real-set nDCG@10 of the real best minus that of the selected,
with a paired bootstrap interval over the real queries; how many questions were kept and what each filter
dropped. The baseline each figure is measured against (the real set's own ranking) comes from the same run.

Usage: python benchmarks/bench_synthetic.py [--datasets scifact,hotpotqa] [--questions 200] [--seed 0]
       [--chunk-sizes whole,256] [--limit N] [--workspace DIR] [--json]
--limit N keeps every document a real query judges relevant plus the first N others (a quick run). The
workspace keeps indexes and embeddings, so a re-run reuses them. Torch uses one thread.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DATASETS = {"scifact": "scifact", "hotpotqa": "hotpotqa_dev500/beir_format"}
METRIC = "ndcg@10"


def data_root() -> Path:
    for root in (REPO.parent, REPO.parents[1]):
        if (root / "shared" / "data").is_dir():
            return root / "shared" / "data"
    return REPO.parent / "shared" / "data"


def limited(evalset: Any, limit: int | None) -> Any:
    """The set with its corpus cut to the judged documents plus the first `limit` others (None: all)."""
    if limit is None:
        return evalset
    judged = {d for q in evalset.queries for d, g in q.relevance.items() if g > 0}
    others = [d for d in evalset.documents if d.id not in judged][:limit]
    keep = judged | {d.id for d in others}
    return evalset.model_copy(update={"documents": [d for d in evalset.documents if d.id in keep]})


def kendall_tau(a: dict[str, float], b: dict[str, float]) -> float:
    from scipy.stats import kendalltau

    ids = sorted(a)
    return float(kendalltau([a[i] for i in ids], [b[i] for i in ids]).statistic)


def best(scores: dict[str, float]) -> str:
    """The best configuration, ties broken by id (the order is total)."""
    return min(scores, key=lambda i: (-scores[i], i))


def agreement(real: Any, generated: Any) -> dict[str, Any]:
    """Tau and regret of the generated set's selection, from the two sweeps' results (same grid)."""
    from ragopt.eval.bootstrap import paired_bootstrap_ci

    r = {t.id: t.metrics[METRIC] for t in real.trials}
    g = {t.id: t.metrics[METRIC] for t in generated.trials}
    if set(r) != set(g):
        raise ValueError(f"the two sweeps ran different grids: {sorted(set(r) ^ set(g))}")
    chosen, top = best(g), best(r)
    per_query = {t.id: t.per_query[METRIC] for t in real.trials}
    ci = paired_bootstrap_ci(per_query[top], per_query[chosen])
    return {
        "kendall_tau": kendall_tau(r, g),
        "regret": r[top] - r[chosen],
        "regret_interval": [ci.low, ci.high],
        "selected": chosen, "real_best": top,
        "real_ndcg": r, "generated_ndcg": g,
    }


def run_dataset(name: str, args: argparse.Namespace, workspace: Path) -> dict[str, Any]:
    from ragopt.data import load_evalset
    from ragopt.eval.sweep import SweepConfig, run_sweep
    from ragopt.synth import SynthConfig
    from ragopt.synth.generate import synthesize

    real = limited(load_evalset(data_root() / DATASETS[name]), args.limit)
    sizes = [s if s == "whole" else int(s) for s in args.chunk_sizes.split(",")]
    grid = SweepConfig(chunk_sizes=sizes, retrievers=["dense", "bm25", "hybrid"], fusions=["rrf", "convex"], top_k=[10])
    out: dict[str, Any] = {"documents": len(real.documents), "real_queries": len(real.queries), "grid": len(sizes) * 4}
    t0 = time.perf_counter()
    generated, record = synthesize(real.documents, SynthConfig(questions=args.questions, seed=args.seed), workspace,
                                   name=f"{name}-generated", progress=args.progress)
    gen_s = time.perf_counter() - t0
    real_sweep = run_sweep(real, grid, workspace, progress=args.progress).results
    gen_sweep = run_sweep(generated, grid, workspace, progress=args.progress).results
    out[record["generator"]] = {**agreement(real_sweep, gen_sweep), "kept": record["counts"]["kept"],
                                "dropped": record["counts"]["dropped"], "candidates": record["counts"]["candidates"],
                                "round_trip": record["filters"]["round_trip"], "generate_s": round(gen_s, 1)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="scifact,hotpotqa")
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk-sizes", default="whole,256")
    p.add_argument("--limit", type=int, default=None, help="judged documents plus this many others (a quick run)")
    p.add_argument("--workspace", default=str(REPO / ".ragopt"))
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    args.progress = sys.stderr.isatty() and not args.json
    import torch

    torch.set_num_threads(1)
    workspace = Path(args.workspace)
    report: dict[str, Any] = {"questions": args.questions, "seed": args.seed, "chunk_sizes": args.chunk_sizes,
                              "limit": args.limit, "top_k": 10, "metric": METRIC, "datasets": {}}
    for name in args.datasets.split(","):
        report["datasets"][name] = run_dataset(name, args, workspace)
    if args.json:
        print(json.dumps(report))
        return 0
    for name, ds in report["datasets"].items():
        for gen, r in ((k, v) for k, v in ds.items() if isinstance(v, dict) and "kendall_tau" in v):
            lo, hi = r["regret_interval"]
            print(f"{name} ({ds['documents']} documents, {ds['real_queries']} real queries, {ds['grid']} configurations) "
                  f"{gen}: Kendall tau {r['kendall_tau']:.3f}; selects {r['selected']} (real best {r['real_best']}), "
                  f"regret {r['regret']:.4f} [{lo:.4f}, {hi:.4f}]; kept {r['kept']}, dropped {r['dropped']}")
            for tid in sorted(r["real_ndcg"], key=lambda i: -r["real_ndcg"][i]):
                print(f"    {tid:<28} real {r['real_ndcg'][tid]:.4f}  generated {r['generated_ndcg'][tid]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
