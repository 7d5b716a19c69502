"""The trust check: does a generated evaluation set rank pipelines as people's questions do?

For each dataset (SciFact, HotpotQA dev500 from ../shared/data), a set is generated from the corpus alone
(`ragopt synth`'s generator and filters; the real queries are never read to generate), and the same sweep grid
(chunk size x retriever x fusion, one top_k) runs on the generated set and on the human-labelled queries. Per
dataset and generator it prints: Kendall tau (tau-b) between the two rankings of configurations by nDCG@10
(all at one top_k, never across K, which would inflate it); the regret of the configuration the generated set
selects (best by its nDCG@10, ties by id), as the real-set nDCG@10 of the real best minus that of the selected,
with a paired bootstrap interval over the real queries; how many questions were kept and what each filter
dropped. The baseline each figure is measured against (the real set's own ranking) comes from the same run.

Usage: python benchmarks/bench_synthetic.py [--datasets scifact,hotpotqa] [--generators extractive,llm] [--questions 200] [--seed 0]
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
SYNTH_DEFAULT_KEEP = 0.2  # SynthConfig's default (kept here so --help imports nothing heavy)
DATASETS = {"scifact": "scifact", "hotpotqa": "hotpotqa_dev500/beir_format"}


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


def run_dataset(name: str, args: argparse.Namespace, workspace: Path) -> dict[str, Any]:
    from ragopt.data import load_evalset
    from ragopt.synth import SynthConfig
    from ragopt.synth.check import check_against
    from ragopt.synth.generate import synthesize

    real = limited(load_evalset(data_root() / DATASETS[name]), args.limit)
    sizes = [s if s == "whole" else int(s) for s in args.chunk_sizes.split(",")]
    out: dict[str, Any] = {"documents": len(real.documents), "real_queries": len(real.queries), "grid": len(sizes) * 4}
    for generator in args.generators.split(","):
        t0 = time.perf_counter()
        config = SynthConfig(questions=args.questions, seed=args.seed, generator=generator, keep_fraction=args.keep_fraction)
        generated, record = synthesize(real.documents, config, workspace, name=f"{name}-{generator}", progress=args.progress)
        gen_s = time.perf_counter() - t0
        checked = check_against(real, generated, workspace, sizes, progress=args.progress)
        out[generator] = {**checked, "kept": record["counts"]["kept"], "dropped": record["counts"]["dropped"],
                          "candidates": record["counts"]["candidates"], "round_trip": record["filters"]["round_trip"],
                          "model_fingerprint": record["model_fingerprint"], "generate_s": round(gen_s, 1)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="scifact,hotpotqa")
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--keep-fraction", type=float, default=SYNTH_DEFAULT_KEEP, help="extractive: share of key words kept as written")
    p.add_argument("--generators", default="extractive", help="extractive and/or llm (SmolLM2 in process; slow on CPU)")
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
    report: dict[str, Any] = {"questions": args.questions, "seed": args.seed, "keep_fraction": args.keep_fraction, "chunk_sizes": args.chunk_sizes,
                              "limit": args.limit, "top_k": 10, "metric": "ndcg@10", "datasets": {}}
    for name in args.datasets.split(","):
        report["datasets"][name] = run_dataset(name, args, workspace)
    if args.json:
        print(json.dumps(report))
        return 0
    from ragopt.synth.check import lines

    for name, ds in report["datasets"].items():
        for gen, r in ((k, v) for k, v in ds.items() if isinstance(v, dict) and "kendall_tau" in v):
            print(f"{name} ({ds['documents']} documents, {ds['real_queries']} labelled queries), {gen} generator: "
                  f"kept {r['kept']} of {r['candidates']} candidates, dropped {r['dropped']}")
            for line in lines(r):
                print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
