"""Select on one split, confirm on another: held-out figures with bootstrap intervals, overfitting flags,
and gates that pass only within noise.

A smaller TopK (or any cheaper configuration) is decided on an evaluation set; the figure that justifies it
must hold on queries the selection never saw. Intervals are percentile bootstrap intervals of the mean over
queries (seeded, so the same run gives the same interval).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragopt.data import EvalSet
from ragopt.eval.gates import Gate, fmt, is_cost
from ragopt.eval.results import GateVerdict, HeldOut, Interval, Trial

CONFIDENCE = 0.95
RESAMPLES = 2000


def mean_interval(values: Sequence[float | None], confidence: float = CONFIDENCE, n_resamples: int = RESAMPLES,
                  seed: int = 0) -> Interval | None:
    """Percentile bootstrap interval of the mean of `values` (None/NaN left out); None when nothing is scored."""
    arr = np.array([np.nan if v is None else v for v in values], dtype=float)
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return None
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(n_resamples, arr.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    return Interval(mean=float(arr.mean()), low=float(np.quantile(means, alpha)), high=float(np.quantile(means, 1 - alpha)))


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
