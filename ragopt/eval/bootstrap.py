"""Paired, seeded bootstrap confidence intervals, so that a baseline comparison fails on a real drop, not on noise.

Both runs are scored on the same queries; the per-query differences (current - baseline) are resampled with
replacement `n_resamples` times and the percentile interval of their mean is the confidence interval.
A quality metric regresses when its mean drops by more than the tolerance AND the interval excludes zero
(the drop is larger than allowed, and noise alone does not explain it). The same seed gives the same
interval, every time.

Costs measured once per trial (p95 latency, context tokens) have no per-query pairs: they regress when the
current value exceeds the baseline's by more than `cost_tolerance`, a share of the baseline (0.2 = +20%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragopt.errors import InputError
from ragopt.eval.gates import fmt, is_cost
from ragopt.eval.results import BaselineComparison, RegressionVerdict, SweepResults, Trial, measured

DEFAULT_RESAMPLES = 2000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0
DEFAULT_COST_TOLERANCE = 0.2  # a rise of more than 20% over the baseline's cost
TRIAL_COSTS = ("p95_ms", "context_tokens")  # compared by default, at trial level
_BLOCK = 256  # resamples drawn at a time, to bound memory on large query sets


@dataclass(frozen=True)
class BootstrapCI:
    mean_diff: float  # mean of current - baseline
    low: float
    high: float
    n: int
    confidence: float
    n_resamples: int
    seed: int


def _pairs(current: Sequence[float | None], baseline: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    if len(current) != len(baseline):
        raise ValueError(f"paired bootstrap needs aligned values: {len(current)} current vs {len(baseline)} baseline")
    c = np.array([np.nan if v is None else v for v in current], dtype=float)
    b = np.array([np.nan if v is None else v for v in baseline], dtype=float)
    keep = ~(np.isnan(c) | np.isnan(b))  # a query undefined in either run is left out of the pairing
    if not keep.any():
        raise ValueError("paired bootstrap needs at least one query scored in both runs")
    return c[keep], b[keep]


def paired_bootstrap_ci(
    current: Sequence[float | None],
    baseline: Sequence[float | None],
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> BootstrapCI:
    """Percentile CI of mean(current - baseline) over queries (aligned lists; None/NaN pairs are dropped)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    c, b = _pairs(current, baseline)
    diff = c - b
    n = diff.size
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, _BLOCK):
        stop = min(start + _BLOCK, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diff[idx].mean(axis=1)
    alpha = 1 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return BootstrapCI(
        mean_diff=float(diff.mean()), low=float(low), high=float(high), n=n,
        confidence=confidence, n_resamples=n_resamples, seed=seed,
    )


def regression(
    current: Sequence[float | None],
    baseline: Sequence[float | None],
    tolerance: float,
    *,
    metric: str = "metric",
    trial_id: str = "",
    higher_is_better: bool | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> RegressionVerdict:
    """Regressed when the mean moves the bad way by more than `tolerance` and the CI excludes zero: for
    higher-is-better, mean(current - baseline) < -tolerance and the CI's upper bound < 0; for costs (lower is
    better), mean > tolerance and the lower bound > 0. `higher_is_better` defaults from the metric's name
    (costs such as *_ms are lower-is-better)."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    if higher_is_better is None:
        higher_is_better = not is_cost(metric)
    ci = paired_bootstrap_ci(current, baseline, n_resamples, confidence, seed)
    c, b = _pairs(current, baseline)
    sign = 1.0 if higher_is_better else -1.0  # turn "worse" into "negative" for both directions
    worse_beyond = sign * ci.mean_diff < -tolerance
    significant = (ci.high < 0) if higher_is_better else (ci.low > 0)
    pct = f"{confidence:.0%}"
    head = (
        f"{metric}: {fmt(float(c.mean()))} vs baseline {fmt(float(b.mean()))} "
        f"(diff {ci.mean_diff:+.4g}, {pct} CI [{ci.low:+.4g}, {ci.high:+.4g}], {ci.n} queries)"
    )
    if worse_beyond and significant:
        tail = f"regression beyond tolerance {fmt(tolerance)}, the interval excludes zero"
    elif worse_beyond:
        tail = f"worse beyond tolerance {fmt(tolerance)} on average, but not significant (the interval includes zero)"
    else:
        tail = f"no regression beyond tolerance {fmt(tolerance)}"
    return RegressionVerdict(
        trial_id=trial_id, metric=metric, n_queries=ci.n,
        baseline_mean=float(b.mean()), current_mean=float(c.mean()), diff=ci.mean_diff,
        ci_low=ci.low, ci_high=ci.high, confidence=confidence, tolerance=tolerance,
        n_resamples=n_resamples, seed=seed, regressed=worse_beyond and significant, message=f"{head}: {tail}",
    )


def cost_regression(
    current: float, baseline: float, tolerance: float, *, metric: str, trial_id: str = "", n_queries: int = 0,
    note: str = "",
) -> RegressionVerdict:
    """A cost measured once per trial: regressed when current > baseline * (1 + tolerance). No interval
    exists for a single figure, so the verdict's CI is the difference itself and `n_resamples` is 0."""
    if tolerance < 0:
        raise ValueError(f"cost tolerance must be >= 0, got {tolerance}")
    diff = current - baseline
    limit = baseline * (1 + tolerance)
    regressed = current > limit
    rise = f"{diff / baseline:+.1%}" if baseline else f"{diff:+.4g}"
    head = f"{metric}: {fmt(current)} vs baseline {fmt(baseline)} ({rise}, allowed up to +{tolerance:.0%})"
    tail = "rise beyond tolerance" if regressed else "no rise beyond tolerance"
    return RegressionVerdict(
        trial_id=trial_id, metric=metric, n_queries=n_queries,
        baseline_mean=baseline, current_mean=current, diff=diff, ci_low=diff, ci_high=diff, confidence=1.0,
        tolerance=tolerance, n_resamples=0, seed=0, regressed=regressed, message=f"{head}: {tail}{note}",
    )


def compare_to_baseline(
    current: SweepResults,
    baseline: SweepResults,
    tolerance: float,
    *,
    baseline_path: str = "",
    trial_ids: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    cost_tolerance: float = DEFAULT_COST_TOLERANCE,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> BaselineComparison:
    """Compare trials of two sweeps on the same dataset: per-query metrics query by query (paired by query
    id, `tolerance` an absolute drop), trial-level costs (p95_ms, context_tokens) by their relative rise
    (`cost_tolerance`).

    Trials are matched by id. By default the current selected trial is compared when the baseline has it,
    else every trial the two share; and every per-query metric both trials carry, plus p95_ms and
    context_tokens where both measured them. `metrics` restricts the comparison to the names it lists.
    A different dataset fingerprint, or nothing in common to compare, is an InputError (field "baseline").
    """
    _check_same_dataset(current, baseline, baseline_path)
    base_trials = {t.id: t for t in baseline.trials}
    if trial_ids is None:
        trial_ids = _default_trial_ids(current, base_trials)
    base_pos = {q: i for i, q in enumerate(baseline.query_ids)}
    shared = [(i, base_pos[q]) for i, q in enumerate(current.query_ids) if q in base_pos]
    verdicts: list[RegressionVerdict] = []
    for tid in trial_ids:
        if tid not in base_trials:
            continue
        cur, base = current.trial(tid), base_trials[tid]
        verdicts += _metric_verdicts(cur, base, metrics, shared, tolerance,
                                     n_resamples=n_resamples, confidence=confidence, seed=seed)
        verdicts += _cost_verdicts(cur, base, metrics, cost_tolerance, n_queries=len(shared))
    if not verdicts:
        raise InputError(
            "nothing to compare: the baseline shares no trial id, per-query metric or cost, and query id with this sweep",
            path=baseline_path or None,
            field="baseline",
        )
    return BaselineComparison(
        path=baseline_path, tolerance=tolerance, verdicts=verdicts, regressed=any(v.regressed for v in verdicts)
    )


def _check_same_dataset(current: SweepResults, baseline: SweepResults, baseline_path: str) -> None:
    """Per-query figures pair up only on the same queries and judgments: another dataset is an input error."""
    if current.dataset.fingerprint != baseline.dataset.fingerprint:
        raise InputError(
            f"baseline was computed on another dataset (fingerprint {baseline.dataset.fingerprint} "
            f"vs {current.dataset.fingerprint})",
            path=baseline_path or None,
            field="baseline",
        )


def _default_trial_ids(current: SweepResults, base_trials: dict[str, Trial]) -> list[str]:
    """The selected trial when the baseline has it, else every trial the two sweeps share."""
    if current.selected is not None and current.selected in base_trials:
        return [current.selected]
    return [t.id for t in current.trials if t.id in base_trials]


def _metric_verdicts(
    cur: Trial, base: Trial, metrics: Sequence[str] | None, shared: Sequence[tuple[int, int]], tolerance: float, *,
    n_resamples: int, confidence: float, seed: int,
) -> list[RegressionVerdict]:
    """One paired-bootstrap verdict per per-query metric both trials carry, over the queries both runs share
    (`shared`: current position, baseline position)."""
    out = []
    names = metrics if metrics is not None else [m for m in cur.per_query if m in base.per_query]
    for name in names:
        if name not in cur.per_query or name not in base.per_query:
            continue
        c = [cur.per_query[name][i] for i, _ in shared]
        b = [base.per_query[name][j] for _, j in shared]
        if not any(x is not None and y is not None and not (math.isnan(x) or math.isnan(y)) for x, y in zip(c, b)):
            continue  # no query scored in both: nothing to compare for this metric
        out.append(regression(c, b, tolerance, metric=name, trial_id=cur.id,
                              n_resamples=n_resamples, confidence=confidence, seed=seed))
    return out


def _cost_verdicts(
    cur: Trial, base: Trial, metrics: Sequence[str] | None, tolerance: float, n_queries: int
) -> list[RegressionVerdict]:
    out = []
    cur_costs, base_costs = cur.costs.model_dump(), base.costs.model_dump()
    for name in TRIAL_COSTS if metrics is None else [m for m in metrics if m in TRIAL_COSTS]:
        c, b = measured(cur_costs.get(name)), measured(base_costs.get(name))
        if c is None or b is None:
            continue
        cached = [who for who, costs in (("current", cur_costs), ("baseline", base_costs)) if costs.get("latency_cached")]
        note = f" (latency reused from cache in the {' and '.join(cached)} run)" if name.endswith("_ms") and cached else ""
        out.append(cost_regression(c, b, tolerance, metric=name, trial_id=cur.id, n_queries=n_queries, note=note))
    return out
