"""What sharing work saves in a sweep, measured in one run on one machine.

1. The whole TopK sweep (K = 1, 3, 5, 10, 20, 50, 100) against one K=100 pass: retrieval runs once at the
   largest K and every smaller K is scored by truncation, so the ratio should stay near 1 (target <= 1.2x).
2. A warm re-run of the same sweep against the cold run (fresh workspace: chunking, embedding, indexing,
   retrieval): the target is under 15%.

Usage: python benchmarks/bench_sweep.py [--dataset DIR] [--chunk-sizes 128,whole]
Default dataset: the shipped evalsets/hospital. Torch is pinned to one thread so runs compare.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(REPO / "evalsets" / "hospital"))
    parser.add_argument("--chunk-sizes", default="128,whole")
    parser.add_argument("--retrievers", default="dense,bm25,hybrid")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from ragopt.cache import Cache
    from ragopt.data import load_evalset
    from ragopt.eval.sweep import SweepConfig, run_sweep

    evalset = load_evalset(args.dataset)
    sizes = [s if s == "whole" else int(s) for s in args.chunk_sizes.split(",")]
    retrievers = args.retrievers.split(",")
    all_k = SweepConfig(chunk_sizes=sizes, retrievers=retrievers, top_k=[1, 3, 5, 10, 20, 50, 100], embedder={"threads": 1})
    one_k = all_k.model_copy(update={"top_k": [100]})
    workspace = Path(tempfile.mkdtemp(prefix="ragopt-bench-"))

    def timed(config: SweepConfig) -> float:
        t0 = time.perf_counter()
        run_sweep(evalset, config, workspace, progress=False)
        return time.perf_counter() - t0

    def forget_retrieval() -> None:
        cache = Cache(workspace / "cache")
        cache.evict("sweep-retrieval")
        cache.close()

    try:
        print(f"dataset {evalset.name}: {len(evalset.documents)} documents, {len(evalset.queries)} queries; "
              f"chunk sizes {sizes}; retrievers {retrievers}")
        cold = timed(all_k)
        warm = timed(all_k)
        print(f"cold sweep (chunk, embed, index, retrieve, score): {cold:8.2f} s")
        print(f"warm re-run (everything cached):                   {warm:8.2f} s   ratio {warm / cold:.3f} (target < 0.15)")
        # Indexes exist now; drop only the cached retrievals so both passes below really retrieve.
        forget_retrieval()
        single = timed(one_k)
        forget_retrieval()
        sweep = timed(all_k)
        print(f"one K=100 pass (retrieval + scoring):              {single:8.2f} s")
        print(f"whole TopK sweep, 7 values of K:                   {sweep:8.2f} s   ratio {sweep / single:.3f} (target <= 1.2)")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    main()
