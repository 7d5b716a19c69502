#!/usr/bin/env python3
"""What the tests no longer time: `ragopt --help` against bare Python, and reusing a built index against building it.

    python benchmarks/bench_startup.py [--repeats 5] [--docs 300] [--json]

"help": the `ragopt --help` process (interpreter start included) against `python -c pass`, best of --repeats,
in wall time and in CPU time (user + system of the child, which other processes on a busy machine distort
less). "index": `build_index` of the first --docs SciFact abstracts (whole documents) into a fresh workspace,
then again with a fresh embedder as a new process would (the index is reused: nothing is embedded).
Every ratio is measured in this run.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _child(cmd: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_help(repeats: int) -> dict[str, float]:
    bare = [_child([sys.executable, "-c", "pass"]) for _ in range(repeats)]
    ragopt = [_child([sys.executable, "-m", "ragopt", "--help"]) for _ in range(repeats)]
    out = {"bare_wall_s": min(w for w, _ in bare), "bare_cpu_s": min(c for _, c in bare),
           "help_wall_s": min(w for w, _ in ragopt), "help_cpu_s": min(c for _, c in ragopt)}
    out["ratio_wall"] = out["help_wall_s"] / out["bare_wall_s"]
    out["ratio_cpu"] = out["help_cpu_s"] / max(out["bare_cpu_s"], 1e-9)
    return out


def bench_index(docs: int) -> dict[str, float]:
    from ragopt.config import ChunkerConfig
    from ragopt.data import load_evalset
    from ragopt.index import build_index, make_embedder

    documents = load_evalset(ROOT.parent / "shared" / "data" / "scifact").documents[:docs]
    with tempfile.TemporaryDirectory() as ws:
        cold = build_index(documents, ChunkerConfig(chunker="whole"), make_embedder(ws), Path(ws), progress=False)
        warm = build_index(documents, ChunkerConfig(chunker="whole"), make_embedder(ws), Path(ws), progress=False)
    return {"docs": docs, "cold_s": cold.seconds, "warm_s": warm.seconds, "warm_over_cold": warm.seconds / cold.seconds,
            "warm_embedded": warm.embedded}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = {"help": bench_help(args.repeats), "index": bench_index(args.docs)}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        h, i = report["help"], report["index"]
        print(f"ragopt --help: {h['help_wall_s']:.2f} s wall ({h['ratio_wall']:.1f}x bare Python), "
              f"{h['help_cpu_s']:.2f} s CPU ({h['ratio_cpu']:.1f}x)")
        print(f"index of {i['docs']} docs: cold {i['cold_s']:.2f} s, reused {i['warm_s']:.3f} s "
              f"({i['warm_over_cold']:.3f} of cold; embedded {i['warm_embedded']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
