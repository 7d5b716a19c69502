"""The README's main job as a user runs it: `ragopt sweep` cold (fresh workspace), then again unchanged in a
fresh process (warm), and again with --remeasure (every stage re-run, indexes and scores kept); beside them the
floor: `ragopt index` embedding the same chunkings alone, in another fresh workspace.

Each run is its own process, so nothing survives in memory between runs: what the warm run saves comes from
the workspace alone. The floor is one `ragopt index` per chunking of the config (each loads the model, as a
user running them would), so cold / floor is what the sweep costs beyond embedding its corpus. Prints every
scenario and the ratios; --json prints one JSON object. Targets: warm / cold <= 0.05 (issues 8 and 30), cold / floor
<= 1.0 (issue 50; 1.5 in issue 30), cold <= 120 s on 2 cores. The machine's load average is reported beside the figures:
timings on a busy machine are inflated, the ratios (measured in one run) less so.

Usage: python benchmarks/bench_sweep.py [--config hospital-sweep] [--top-k 1,3,5,10,20]
                                        [--scenarios floor,cold,warm,remeasure] [--runtimes onnx-int8,torch]
                                        [--repeat N] [--keep DIR] [--json]

The floor always embeds with float32 torch; with --runtimes A,B the cold sweep runs once per runtime (A's is
"cold", B's "cold_B", each in a fresh workspace), and each cold / floor is printed. A cold sweep derives the int8
model in its fresh workspace, as a first run does ($RAGOPT_MODEL_CACHE, a folder shared by workspaces, is unset
for every run). With --repeat N the scenarios run N times in turn (floor, cold, floor, cold...): every run's
seconds and cold / floor are printed, then the medians (this machine's speed drifts by 20% within an hour, so
one pair's ratio is one sample).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCENARIOS = ("floor", "cold", "warm", "remeasure")  # the order they run in; warm and remeasure follow cold


def run(cmd: list[str], workspace: Path) -> float:
    """Seconds `python -m ragopt CMD` takes with `workspace` as its RAGOPT_HOME."""
    env = {**{k: v for k, v in os.environ.items() if k != "RAGOPT_MODEL_CACHE"}, "RAGOPT_HOME": str(workspace)}
    argv = [sys.executable, "-m", "ragopt", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1 = no trial passes the gates: still a measured sweep
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds


def index_commands(config_path: Path) -> list[list[str]]:
    """One `ragopt index` per chunking the sweep config builds, over its dataset."""
    from ragopt.config import load_toml
    from ragopt.eval.space import SweepConfig
    from ragopt.shipped import shipped_dataset

    config = load_toml(config_path, SweepConfig)
    dataset = Path(config.dataset) if config.dataset else shipped_dataset()
    if not dataset.is_absolute():
        dataset = (config_path.parent / dataset).resolve()
    commands = []
    for chunker in config.chunker_configs():
        flags = ["--whole-docs"] if chunker.chunker == "whole" else [
            "--chunker", chunker.chunker, "--chunk-size", str(chunker.size), "--chunk-overlap", str(chunker.overlap)]
        commands.append(["index", "--dataset", str(dataset), *flags, "--embedder-runtime", "torch"])  # the float32 floor
    return commands


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="hospital-sweep", help="a sweep TOML or a shipped config's name")
    parser.add_argument("--top-k", help="override the config's K values (comma-separated)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"a comma-separated subset of {','.join(SCENARIOS)}")
    parser.add_argument("--runtimes", help="embedder runtimes of the cold sweep, one cold run each (default: the default "
                        "runtime; the first also runs warm and remeasure); the floor always embeds with float32 torch")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="run the scenarios N times in turn; medians")
    parser.add_argument("--keep", metavar="DIR", help="keep each sweep's outputs (results.json, report.html...) under DIR")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown or not args.scenarios or ({"warm", "remeasure"} & set(args.scenarios) and "cold" not in args.scenarios):
        parser.error(f"--scenarios: a subset of {','.join(SCENARIOS)}; warm and remeasure need cold")
    from ragopt.config import RUNTIME_CHOICES, EmbedderConfig
    from ragopt.shipped import resolve_config

    args.runtimes = [r.strip() for r in (args.runtimes or EmbedderConfig().runtime).split(",") if r.strip()]
    if not args.runtimes or set(args.runtimes) - set(RUNTIME_CHOICES):
        parser.error(f"--runtimes: a subset of {','.join(RUNTIME_CHOICES)}")

    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    args.config_path = resolve_config(args.config)
    if not args.config_path.is_file():
        parser.error(f"--config: {args.config} not found")
    return args


def measure(args: argparse.Namespace, root: Path) -> dict[str, float]:
    sweep_args = ["--config", args.config, "--no-progress"] + (["--top-k", args.top_k] if args.top_k else [])
    seconds: dict[str, float] = {}
    for scenario in (s for s in SCENARIOS if s in args.scenarios):
        for runtime in args.runtimes if scenario == "cold" else args.runtimes[:1]:
            # the first runtime's runs are "cold", "warm"...; another runtime's cold run is "cold_RUNTIME", in its own workspace
            name = scenario if runtime == args.runtimes[0] or scenario == "floor" else f"{scenario}_{runtime}"
            if scenario == "floor":
                commands, workspace = index_commands(args.config_path), root / "ws-floor"
            else:
                extra = ["--remeasure"] if scenario == "remeasure" else []
                commands = [["sweep", *sweep_args, "--embedder-runtime", runtime, "--out", str(root / f"out-{name}"), *extra]]
                workspace = root / ("ws" if name == scenario else f"ws-{runtime}")
            print(f"{name}: " + "; ".join(f"ragopt {' '.join(c)}" for c in commands) + " ...", file=sys.stderr, flush=True)
            seconds[name] = sum(run(c, workspace) for c in commands)
            print(f"{name}: {seconds[name]:.1f} s (load average {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    return seconds


def report(args: argparse.Namespace, runs: list[dict[str, float]], results: dict[str, Any] | None) -> dict[str, Any]:
    """The figures of one run; of several, the median seconds and ratios, and each run's own."""
    seconds = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
    out: dict[str, Any] = {"config": args.config, "runtimes": args.runtimes, "seconds": seconds,
                           "load_average_1m_at_end": os.getloadavg()[0], "cpus": os.cpu_count()}
    if len(runs) > 1:
        out["runs"] = runs
        if "cold" in seconds and "floor" in seconds:
            out["cold_over_floor_each"] = [r["cold"] / r["floor"] for r in runs]
    if results is not None:
        out.update(trials=len(results["trials"]), selected=results["selected"])
    for runtime in args.runtimes[1:]:
        if f"cold_{runtime}" in seconds and "floor" in seconds:
            out[f"cold_{runtime}_over_floor"] = seconds[f"cold_{runtime}"] / seconds["floor"]
    for name, over in (("cold_over_floor", "floor"), ("warm_over_cold", "warm"), ("remeasure_over_cold", "remeasure")):
        if "cold" in seconds and over in seconds:  # the median of each run's own ratio
            out[name] = statistics.median(r["cold"] / r[over] if name == "cold_over_floor" else r[over] / r["cold"] for r in runs)
    return out


def print_table(out: dict[str, Any]) -> None:
    s = out["seconds"]
    if "selected" in out:
        print(f"{out['trials']} trials; selected {out['selected']}")
    lines = {
        "floor": ("floor (ragopt index, each chunking alone, fresh workspace):", "cold_over_floor", "cold / floor", "<= 1.0"),
        "cold": ("cold (fresh workspace: chunk, embed, index, every stage, scores):", None, "", "<= 120 s on 2 cores"),
        "warm": ("warm (fresh process, nothing changed):", "warm_over_cold", "warm / cold", "<= 0.05"),
        "remeasure": ("--remeasure (fresh process, every stage run again):", "remeasure_over_cold", "remeasure / cold", ""),
    }
    for name, (label, ratio, ratio_name, target) in lines.items():
        if name in s:
            tail = f"   {ratio_name} {out[ratio]:.3f}" if ratio in out else ""
            print(f"{label:68s}{s[name]:8.1f} s{tail}" + (f"  (target {target})" if target else ""))
    for runtime in out["runtimes"][1:]:
        if f"cold_{runtime}" in s:
            ratio = f"   cold / floor {out[f'cold_{runtime}_over_floor']:.3f}" if f"cold_{runtime}_over_floor" in out else ""
            print(f"{f'cold with --embedder-runtime {runtime} (its own fresh workspace):':68s}{s[f'cold_{runtime}']:8.1f} s{ratio}"
                  f"; selected {out.get(f'selected_{runtime}')}")
    for i, run_seconds in enumerate(out.get("runs", []), start=1):
        ratio = f"; cold / floor {out['cold_over_floor_each'][i - 1]:.3f}" if "cold_over_floor_each" in out else ""
        print(f"run {i}: " + ", ".join(f"{name} {value:.1f} s" for name, value in run_seconds.items()) + ratio)
    if "runs" in out:
        print("(the figures above are the runs' medians)")
    print(f"load average (1 min) at the end: {out['load_average_1m_at_end']:.1f} on {out['cpus']} CPUs")


def main() -> None:
    args = parse_args()
    root = Path(tempfile.mkdtemp(prefix="ragopt-bench-sweep-"))
    try:
        runs = [measure(args, root / f"run-{i}") for i in range(args.repeat)]
        last, seconds = root / f"run-{args.repeat - 1}", runs[-1]
        sweeps = [n for n in ("warm", "cold") if n in seconds]
        results = json.loads((last / f"out-{sweeps[0]}" / "results.json").read_text()) if sweeps else None
        others = {r: json.loads((last / f"out-cold_{r}" / "results.json").read_text())["selected"]
                  for r in args.runtimes[1:] if f"cold_{r}" in seconds}
        if args.keep:  # the last run's outputs
            for name in (n for n in seconds if n != "floor"):
                shutil.copytree(last / f"out-{name}", Path(args.keep) / name, dirs_exist_ok=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = report(args, runs, results) | {f"selected_{r}": selected for r, selected in others.items()}
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)


if __name__ == "__main__":
    main()
