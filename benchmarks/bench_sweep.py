"""The README's main job as a user runs it: `ragopt sweep` cold (fresh workspace), then again unchanged in a
fresh process (warm), and again with --remeasure (every stage re-run, indexes and scores kept).

Each run is its own `ragopt sweep` process, so nothing survives in memory between runs: what the warm run
saves comes from the workspace alone. Prints every scenario and the ratios to the cold run; --json prints
one JSON object. Target (issue 8): warm / cold <= 0.10.

Usage: python benchmarks/bench_sweep.py [--config hospital-sweep] [--top-k 1,3,5,10,20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(args: list[str], workspace: Path, out: Path) -> float:
    env = {**os.environ, "RAGOPT_HOME": str(workspace)}
    cmd = [sys.executable, "-m", "ragopt", "sweep", "--out", str(out), "--no-progress", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1 = no trial passes the gates: still a measured sweep
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="hospital-sweep", help="a sweep TOML or a shipped config's name")
    parser.add_argument("--top-k", help="override the config's K values (comma-separated)")
    parser.add_argument("--keep", metavar="DIR", help="keep each run's outputs (results.json, report.html...) under DIR")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    sweep_args = ["--config", args.config] + (["--top-k", args.top_k] if args.top_k else [])
    root = Path(tempfile.mkdtemp(prefix="ragopt-bench-sweep-"))
    try:
        workspace = root / "ws"
        scenarios = {}
        for name, extra in (("cold", []), ("warm", []), ("remeasure", ["--remeasure"])):
            if not args.json:
                print(f"{name}: ragopt sweep {' '.join(sweep_args + extra)} ...", file=sys.stderr, flush=True)
            scenarios[name] = run(sweep_args + extra, workspace, root / f"out-{name}")
        results = json.loads((root / "out-warm" / "results.json").read_text())
        if args.keep:
            for name in scenarios:
                shutil.copytree(root / f"out-{name}", Path(args.keep) / name, dirs_exist_ok=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "config": args.config,
        "trials": len(results["trials"]),
        "seconds": scenarios,
        "warm_over_cold": scenarios["warm"] / scenarios["cold"],
        "remeasure_over_cold": scenarios["remeasure"] / scenarios["cold"],
        "selected": results["selected"],
    }
    if args.json:
        print(json.dumps(report))
        return
    print(f"{report['trials']} trials; selected {report['selected']}")
    print(f"cold (fresh workspace: chunk, embed, index, every stage, scores): {scenarios['cold']:8.1f} s")
    print(f"warm (fresh process, nothing changed):                           {scenarios['warm']:8.1f} s   "
          f"ratio {report['warm_over_cold']:.3f} (target <= 0.10)")
    print(f"--remeasure (fresh process, every stage run again):              {scenarios['remeasure']:8.1f} s   "
          f"ratio {report['remeasure_over_cold']:.3f}")


if __name__ == "__main__":
    main()
