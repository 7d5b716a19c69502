#!/usr/bin/env python3
"""The chance that a race drops a trial that truly passes its answer gate, by simulation.

A trial whose true rate on a 0/1 answer metric (answer_contains_reference, say) sits at or above a `>=` gate passes it
on every question, as the grid measures it; the race must not drop it on a subset. Each simulated race draws a
trial's 0/1 scores for n questions (seeded), then runs the race's own test (`ragopt.eval.race.interval_state`, at the
per-test confidence the race uses: `per_test_confidence`) after every round but the last, with the default schedule,
minimum questions and confidence of a sweep; a FAIL in any round is a drop. Beside it, the same races decided by the
interval the race used before (a percentile bootstrap at `race_confidence`, no correction for the rounds; the
bootstrap means of 0/1 scores are drawn as Binomial(n, share) / n, their exact distribution).

    python scripts/race_drop_chance.py [--races 5000] [--questions 20,50,80,249,1000] [--thresholds 0.15,0.5,0.85]
                                       [--above 0,0.05] [--seed 0] [--json]

Prints, for each (questions, threshold, true rate), the share of races that dropped the trial, and the largest of
them against 1 - race_confidence (the race's promise).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from ragopt.eval.gates import Gate
from ragopt.eval.race import FAIL, round_sizes, per_test_confidence, interval_state
from ragopt.eval.space import SweepConfig

BOOTSTRAP_RESAMPLES = 2000


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def old_drop(scores: np.ndarray, sizes: list[int], threshold: float, confidence: float, rng: np.random.Generator) -> bool:
    """The interval the race used before: a percentile bootstrap at `confidence`, every round at the same one."""
    alpha = (1 - confidence) / 2
    for size in sizes[:-1]:
        means = rng.binomial(size, scores[:size].mean(), size=BOOTSTRAP_RESAMPLES) / size
        if np.quantile(means, 1 - alpha) < threshold:
            return True
    return False


def simulate(n: int, threshold: float, rate: float, races: int, config: SweepConfig, seed: int) -> dict:
    """Drop shares of one case, now and before, over `races` seeded races."""
    sizes = round_sizes(n, config.race_schedule, config.race_min_questions)
    tests = len(sizes) - 1  # one answer gate
    confidence = per_test_confidence(config.race_confidence, tests)
    gate = Gate.parse(f"answer_contains_reference>={threshold:g}")
    rng = np.random.default_rng([seed, n, round(threshold * 1e6), round(rate * 1e6)])
    dropped = dropped_before = 0
    for _ in range(races):
        scores = (rng.random(n) < rate).astype(float)
        if any(interval_state(gate, scores[:size].tolist(), confidence, seed)[0] == FAIL for size in sizes[:-1]):
            dropped += 1
        dropped_before += old_drop(scores, sizes, threshold, config.race_confidence, rng)
    return {"questions": n, "threshold": threshold, "true_rate": rate, "round_sizes": sizes, "tests": tests,
            "per_test_confidence": confidence, "races": races, "drop_share": dropped / races,
            "drop_share_before": dropped_before / races}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=5000, help="simulated races per case")
    parser.add_argument("--questions", type=_ints, default=[20, 50, 80, 249, 1000], help="evaluation set sizes")
    parser.add_argument("--thresholds", type=_floats, default=[0.15, 0.5, 0.85], help="the gate's thresholds (>=)")
    parser.add_argument("--above", type=_floats, default=[0.0, 0.05], help="true rate minus threshold (>= 0: passes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.races < 1 or any(n < 1 for n in args.questions) or any(d < 0 for d in args.above) \
            or any(not 0 < t < 1 for t in args.thresholds):
        print("race_drop_chance: --races and --questions must be positive, --above >= 0, --thresholds in (0, 1)",
              file=sys.stderr)
        return 2
    config = SweepConfig()
    cases = [simulate(n, t, min(1.0, t + d), args.races, config, args.seed)
             for n in args.questions for t in args.thresholds for d in args.above]
    worst = max(cases, key=lambda c: c["drop_share"])
    out = {"race_confidence": config.race_confidence, "schedule": config.race_schedule,
           "min_questions": config.race_min_questions, "seed": args.seed, "promise": 1 - config.race_confidence,
           "max_drop_share": worst["drop_share"], "max_drop_share_before": max(c["drop_share_before"] for c in cases),
           "held": worst["drop_share"] <= 1 - config.race_confidence, "cases": cases}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"race defaults: confidence {config.race_confidence:g}, schedule {config.race_schedule}, "
          f"at least {config.race_min_questions} questions a round; {args.races} races a case, seed {args.seed}")
    print(f"{'questions':>9} {'gate':>6} {'rate':>6} {'rounds':>16} {'each test':>9} {'dropped':>8} {'before':>8}")
    for c in cases:
        print(f"{c['questions']:>9} {c['threshold']:>6.3g} {c['true_rate']:>6.3g} {str(c['round_sizes']):>16} "
              f"{c['per_test_confidence']:>9.4g} {c['drop_share']:>8.2%} {c['drop_share_before']:>8.2%}")
    print(f"largest drop share: {out['max_drop_share']:.2%} (before: {out['max_drop_share_before']:.2%}); "
          f"promise: at most {out['promise']:.0%}: {'held' if out['held'] else 'NOT held'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
