"""Full grid against race on the same grid, each a fresh `ragopt sweep` process in a fresh workspace:

- `main`: the README's main job (hospital-sweep: 80 trials, 249 questions, extractive answers);
- `smollm2`: a grid answered by SmolLM2-135M through llama.cpp on a seeded sample of the shipped questions (chunks of
  64 and 128 tokens x BM25 x K = 1, 2, 3, 4, 5, 10), gated on recall@5 and on answer_contains_reference, so that the
  answers, not retrieval alone, decide the pick.

For each: the answers and generator calls each arm made (results.json `generations`), their wall time, the trial
each selects, and the full grid's figures of the race's pick beside the grid's pick: for every gate metric and for
citation precision, the paired bootstrap interval (95%, seeded) of the difference over the grid's per-question
figures. Within noise means the interval contains zero. Prints every scenario; --json prints one JSON object.

Usage: python benchmarks/bench_race.py [--scenarios main,smollm2] [--questions 80] [--max-tokens 48]
                                       [--keep DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCENARIOS = ("main", "smollm2")
# answer_contains_reference 0.15: inside the 0.100-0.275 that SmolLM2-135M measured over these 12 trials on 40 other
# questions, so that the answers decide which trials pass (at 0.3 none did, and there was no pick to compare)
SMOLLM2_GATES = ("recall@5>=0.85", "answer_contains_reference>=0.15")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: main,smollm2")
    p.add_argument("--questions", type=int, default=80, help="smollm2: questions sampled from the shipped set (seeded)")
    p.add_argument("--max-tokens", type=int, default=48, help="smollm2: the answer's token budget")
    p.add_argument("--keep", help="keep every workspace and output under this folder (default: a temporary one)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    from ragopt.errors import InputError

    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown or not scenarios:
        raise InputError(f"unknown scenario {unknown[0] if unknown else '(none)'!r}; known: {', '.join(SCENARIOS)}",
                         field="--scenarios")
    if args.questions < 2:
        raise InputError(f"need at least 2 questions, got {args.questions}", field="--questions")
    if args.max_tokens < 1:
        raise InputError(f"expected a positive token budget, got {args.max_tokens}", field="--max-tokens")
    args.scenarios = scenarios
    return args


def sample_set(root: Path, n: int, seed: int = 0) -> Path:
    """The shipped set's corpus with `n` of its questions, drawn with a seed."""
    from ragopt.shipped import shipped_dataset

    source = shipped_dataset()
    lines = (source / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    kept = sorted(random.Random(seed).sample(range(len(lines)), min(n, len(lines))))
    target = root / f"hospital-sample-{n}"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "corpus.jsonl", target / "corpus.jsonl")
    (target / "questions.jsonl").write_text("".join(lines[i] + "\n" for i in kept), encoding="utf-8")
    return target


def smollm2_config(root: Path, dataset: Path, max_tokens: int) -> Path:
    path = root / "smollm2-race.toml"
    gates = ", ".join(f'"{g}"' for g in SMOLLM2_GATES)
    path.write_text(f'dataset = "{dataset}"\nchunk_sizes = [64, 128]\nchunk_overlaps = [16]\nretrievers = ["bm25"]\n'
                    f"top_k = [1, 2, 3, 4, 5, 10]\ngates = [{gates}]\nrace_min_questions = 10\n\n"
                    f'[stages.generate]\ngenerator = "llama"\nmax_tokens = {max_tokens}\n', encoding="utf-8")
    return path


def sweep(root: Path, name: str, flags: list[str]) -> dict[str, Any]:
    """One fresh `ragopt sweep` process: its wall time and results.json."""
    workspace, out = root / f"ws-{name}", root / f"out-{name}"
    shutil.rmtree(workspace, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "ragopt", "--workspace", str(workspace), "sweep", *flags, "--out", str(out), "--no-progress"]
    print(f"[bench_race] {name}: {' '.join(argv[3:])}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    seconds = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # 1: no trial passes, still a measured sweep
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    (root / f"{name}.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    return {"seconds": seconds, "results": json.loads((out / "results.json").read_text(encoding="utf-8"))}


def compare_picks(grid: dict[str, Any], race: dict[str, Any]) -> dict[str, Any]:
    """The grid's figures of the race's pick against the grid's pick: paired intervals of the difference."""
    from ragopt.eval.bootstrap import paired_bootstrap_ci
    from ragopt.eval.gates import Gate

    trials = {t["id"]: t for t in grid["trials"]}
    picked, best = race["selected"], grid["selected"]
    metrics = [Gate.parse(g).metric for g in grid["gates"]] + ["citation_precision"]
    out = {}
    for metric in dict.fromkeys(metrics):
        row: dict[str, Any] = {"grid_pick": (trials[best]["metrics"].get(metric) if best else None),
                               "race_pick": (trials[picked]["metrics"].get(metric) if picked else None)}
        a, b = (trials[picked]["per_query"].get(metric) if picked else None), (trials[best]["per_query"].get(metric) if best else None)
        if a is not None and b is not None:
            ci = paired_bootstrap_ci(a, b)
            row.update(diff=ci.mean_diff, low=ci.low, high=ci.high, within_noise=ci.low <= 0 <= ci.high)
        out[metric] = row
    return out


def scenario(root: Path, name: str, args: argparse.Namespace) -> dict[str, Any]:
    if name == "main":
        flags = []
    else:
        flags = ["--config", str(smollm2_config(root, sample_set(root, args.questions), args.max_tokens))]
    grid = sweep(root, f"{name}-grid", [*flags, "--no-race"])
    race = sweep(root, f"{name}-race", [*flags, "--race"])
    g, r = grid["results"], race["results"]
    gens = {arm: res["generations"] for arm, res in (("grid", g), ("race", r))}
    return {
        "trials": len(g["trials"]), "questions": len(g["query_ids"]), "gates": g["gates"],
        "grid": {"seconds": grid["seconds"], "selected": g["selected"], **gens["grid"]},
        "race": {"seconds": race["seconds"], "selected": r["selected"], **gens["race"],
                 "dropped": sum(1 for t in r["trials"] if (t.get("race") or {}).get("status") == "dropped"),
                 "round_sizes": r["race"]["round_sizes"], "confidence": r["race"]["confidence"]},
        "ratios": {"answers": gens["race"]["answers"] / max(gens["grid"]["answers"], 1),
                   "generated": gens["race"]["generated"] / max(gens["grid"]["generated"], 1),
                   "seconds": race["seconds"] / grid["seconds"]},
        "same_pick": g["selected"] == r["selected"],
        "race_pick_vs_grid_pick": compare_picks(g, r),
        "load_average": os.getloadavg(),
    }


def print_scenario(name: str, s: dict[str, Any]) -> None:
    g, r, ratio = s["grid"], s["race"], s["ratios"]
    print(f"{name}: {s['trials']} trials x {s['questions']} questions, gates {', '.join(s['gates'])}")
    for arm, row in (("grid", g), ("race", r)):
        print(f"  {arm:<5} {row['answers']:>6,} answers, {row['generated']:>6,} generator calls, "
              f"{row['seconds']:8.1f} s, selected {row['selected']}")
    print(f"  race / grid: answers {ratio['answers']:.1%}, generator calls {ratio['generated']:.1%}, "
          f"time {ratio['seconds']:.1%}; {r['dropped']} trials dropped; same pick: {s['same_pick']}")
    for metric, row in s["race_pick_vs_grid_pick"].items():
        interval = (f"diff {row['diff']:+.4f} [{row['low']:+.4f}, {row['high']:+.4f}] "
                    f"{'within noise' if row['within_noise'] else 'BEYOND NOISE'}") if "diff" in row else "not measured"
        print(f"  {metric:<28} grid pick {row['grid_pick']}, race pick {row['race_pick']}: {interval}")


def main() -> None:
    args = parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-race-"))
    root.mkdir(parents=True, exist_ok=True)
    out = {"scenarios": {}, "date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count()}
    for name in args.scenarios:
        out["scenarios"][name] = scenario(root, name, args)
        if not args.json:
            print_scenario(name, out["scenarios"][name])
    if args.json:
        print(json.dumps(out, indent=2))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    from ragopt.errors import InputError

    try:
        main()
    except InputError as exc:
        print(f"bench_race: error: {exc}", file=sys.stderr)
        sys.exit(2)
