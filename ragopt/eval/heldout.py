"""Select on one split, confirm on another: held-out figures with bootstrap intervals, overfitting flags,
and gates that pass only within noise.

A smaller TopK (or any cheaper configuration) is decided on an evaluation set; the figure that justifies it
must hold on queries the selection never saw. Intervals are of the mean over queries (`mean_interval`: Wilson for
0/1 scores, a seeded percentile bootstrap with a minimum width for others, so the same run gives the same interval).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from ragopt.data import EvalSet
from ragopt.eval.gates import Gate, fmt, is_cost
from ragopt.eval.results import GateVerdict, HeldOut, Interval, Trial

CONFIDENCE = 0.95
RESAMPLES = 2000


def mean_interval(values: Sequence[float | None], confidence: float = CONFIDENCE, n_resamples: int = RESAMPLES,
                  seed: int = 0) -> Interval | None:
    """An interval of the mean of `values` (None/NaN left out) at `confidence`; None when nothing is scored.

    0/1 scores (the share of questions a trial gets right): the Wilson score interval, which has width when every
    score is equal (20 zeros: [0, 0.16] at 95%), where a percentile bootstrap collapses to [0, 0]. Other scores:
    the percentile bootstrap (seeded), never narrower on either side than `min_half_width`, the least a mean can
    be unsure of after n scores (the Wilson bound of a share seen 0 times in n), and kept within [0, 1] when the
    scores are."""
    arr = np.array([np.nan if v is None else v for v in values], dtype=float)
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return None
    mean = float(arr.mean())
    if np.isin(arr, (0.0, 1.0)).all():
        low, high = wilson(mean, arr.size, confidence)
        return Interval(mean=mean, low=low, high=high)
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(n_resamples, arr.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    floor = min_half_width(arr.size, confidence)
    low, high = min(float(np.quantile(means, alpha)), mean - floor), max(float(np.quantile(means, 1 - alpha)), mean + floor)
    if arr.min() >= 0 and arr.max() <= 1:
        low, high = max(low, 0.0), min(high, 1.0)
    return Interval(mean=mean, low=low, high=high)


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def wilson(share: float, n: int, confidence: float) -> tuple[float, float]:
    """The Wilson score interval of a share observed over n 0/1 scores (two-sided, at `confidence`)."""
    z2 = _z(confidence) ** 2
    center = (share + z2 / (2 * n)) / (1 + z2 / n)
    half = math.sqrt(z2) / (1 + z2 / n) * math.sqrt(share * (1 - share) / n + z2 / (4 * n * n))
    # the interval holds the share itself; rounding alone put 1 - 1e-16 as the top of an all-ones interval, and a
    # held-out 1.0 was then flagged as outside it (OVERFIT)
    return max(0.0, min(share, center - half)), min(1.0, max(share, center + half))


def min_half_width(n: int, confidence: float) -> float:
    """How far the mean of n scores in [0, 1] may lie from what they show, at least: a score that differs on a
    share of questions none of the n drew moves it by up to that share, whose Wilson upper bound is z^2/(n + z^2)."""
    z2 = _z(confidence) ** 2
    return z2 / (n + z2)


def split_holdout(evalset: EvalSet, share: float, seed: int) -> tuple[EvalSet, EvalSet]:
    """A seeded random split of the queries: (selection set, held-out set); documents are shared."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(evalset.queries))
    n_out = max(1, round(share * len(order)))
    if n_out >= len(order):
        raise ValueError("holdout leaves no query to select on")
    held = set(order[:n_out].tolist())
    pick = lambda keep: [q for i, q in enumerate(evalset.queries) if (i in held) == keep]  # noqa: E731
    return (evalset.model_copy(update={"queries": pick(False)}), evalset.model_copy(update={"queries": pick(True)}))


def held_out(selected: Trial, confirmed: Trial, split: str, selection_split: str, metrics: Sequence[str],
             seed: int = 0) -> HeldOut:
    """The selected trial re-run on the report split: its metrics, both splits' intervals, and which
    metrics overfit (the held-out mean falls outside the selection interval)."""
    intervals, selection, overfit = {}, {}, {}
    for name in metrics:
        held = mean_interval(confirmed.per_query.get(name, []), seed=seed)
        chosen = mean_interval(selected.per_query.get(name, []), seed=seed)
        if held is not None:
            intervals[name] = held
        if chosen is not None:
            selection[name] = chosen
        if held is not None and chosen is not None:
            overfit[name] = not chosen.low <= held.mean <= chosen.high
    n = len(next(iter(confirmed.per_query.values()), []))
    return HeldOut(split=split, selection_split=selection_split, trial=selected.id, n_queries=n, confidence=CONFIDENCE,
                   metrics=dict(confirmed.metrics), intervals=intervals, selection_intervals=selection, overfit=overfit)


def mark_noise(verdicts: list[GateVerdict], trial: Trial, gates: Sequence[Gate], seed: int = 0) -> list[GateVerdict]:
    """Each quality gate's verdict, saying whether the metric's interval straddles the threshold."""
    out = []
    for verdict, gate in zip(verdicts, gates):
        interval = None if is_cost(gate.metric) else mean_interval(trial.per_query.get(gate.metric, []), seed=seed)
        if interval is None:
            out.append(verdict)
            continue
        noisy = interval.low < gate.threshold < interval.high
        note = (f"; within noise: the {CONFIDENCE:.0%} interval [{fmt(interval.low)}, {fmt(interval.high)}] "
                f"straddles {fmt(gate.threshold)}") if noisy else ""
        out.append(verdict.model_copy(update={"within_noise": noisy, "message": verdict.message + note}))
    return out
