"""What the sweep's outputs share: value formatting, column choices, trial labels and order, the closest trial
to passing and the Pareto front. Used by report_summary (markdown), report_plots (figures), report_html (page)
and report (CSV and writing every output)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ragopt.eval.gates import objective_key, quality_metric, rank_trials
from ragopt.eval.results import GateVerdict, SweepResults, Trial, TrialParams, measured

Latencies = Mapping[str, Sequence[float]]  # trial id -> per-query retrieval ms

_METRIC_ORDER = ("recall", "ndcg", "mrr", "precision", "hit", "span_recall")
_BASE_PARAMS = tuple(TrialParams.model_fields)
_TABLE_COSTS = ("context_tokens", "p50_ms", "p95_ms", "p99_ms", "n_chunks", "index_bytes", "index_build_s")
_COST_LABELS = {
    "context_tokens": "ctx tokens", "p50_ms": "p50 ms", "p95_ms": "p95 ms", "p99_ms": "p99 ms",
    "n_chunks": "chunks", "index_bytes": "index MB", "index_build_s": "build s",
}
_K_RE = re.compile(r"^(.*)@(\d+)$")


# ---------------------------------------------------------------------------------------------- helpers


def _metric_sort_key(name: str) -> tuple[int, str, int]:
    m = _K_RE.match(name)
    base, k = (m.group(1), int(m.group(2))) if m else (name, 0)
    order = _METRIC_ORDER.index(base) if base in _METRIC_ORDER else len(_METRIC_ORDER)
    return (order, base, k)


def _fmt_value(name: str, value: Any) -> str:
    x = measured(value)
    if x is None:
        return "" if value is None else str(value)
    if name == "index_bytes":
        return f"{x / 1e6:,.1f}"
    if name in ("context_tokens", "n_chunks"):
        return f"{x:,.0f}"
    if name.endswith("_ms") or name.endswith("_s"):
        return f"{x:.2f}" if x < 10 else f"{x:,.1f}"
    if isinstance(value, int):
        return str(value)
    return f"{x:.3f}"


def _extra_params(trials: Sequence[Trial]) -> list[str]:
    keys: list[str] = []
    for t in trials:
        for k in t.params.model_dump():
            if k not in _BASE_PARAMS and k not in keys:
                keys.append(k)
    return keys


def _retriever_label(p: TrialParams) -> str:
    label = p.retriever
    if p.fusion:
        label += f" · {p.fusion}"
    if p.alpha is not None and p.fusion != "rrf":
        label += f" α={p.alpha:g}"
    return label


def _config_label(t: Trial, extras: Sequence[str]) -> str:
    """Everything but the chunker and top_k: one line in the Recall@K plot, one colour in the scatters."""
    label = _retriever_label(t.params)
    dumped = t.params.model_dump()
    for k in extras:
        if dumped.get(k) is not None:
            label += f" {k}={dumped[k]}"
    return label


def _chunker_order(t: Trial) -> tuple[int, float, float]:
    p = t.params
    if p.chunker == "whole":
        return (1, 0, 0)
    return (0, p.chunk_size or 0, p.chunk_overlap or 0)


def _common_metrics(trials: Sequence[Trial]) -> list[str]:
    """Metrics every trial has (the documented @10 set), in a fixed order."""
    if not trials:
        return []
    common = set(trials[0].metrics)
    for t in trials[1:]:
        common &= set(t.metrics)
    return sorted(common, key=_metric_sort_key)


def _verdicts(results: SweepResults, t: Trial) -> list[GateVerdict]:
    return results.verdicts.get(t.id, [])


def _passed(results: SweepResults, t: Trial) -> bool:
    return all(v.passed for v in _verdicts(results, t))


def _ranked(results: SweepResults) -> list[Trial]:
    return rank_trials(results.trials, results.gates, verdicts=results.verdicts)


def plot_metric(results: SweepResults) -> str:
    """The quality metric of the scatter plots: ndcg@10 when the trials have it, else the objective's quality."""
    if results.trials and all("ndcg@10" in t.metrics for t in results.trials):
        return "ndcg@10"
    return quality_metric(results.gates)


def closest_trial(results: SweepResults) -> Trial | None:
    """The trial nearest to passing: fewest failed gates, then the smallest total shortfall (relative to each
    threshold), then the objective. Shown when no trial passes."""
    if not results.trials:
        return None
    quality = quality_metric(results.gates)

    def shortfall(v: GateVerdict) -> float:
        if v.passed:
            return 0.0
        if v.margin is None:
            return math.inf
        return -v.margin / abs(v.threshold) if v.threshold else -v.margin

    def key(t: Trial) -> tuple[int, float, tuple[float, float, float, str]]:
        vs = _verdicts(results, t)
        return (sum(not v.passed for v in vs), sum(shortfall(v) for v in vs), objective_key(t, quality))

    return min(results.trials, key=key)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (lower cost x, higher quality y), by cost.
    Of identical points only one is kept."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best = -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def _table_columns(results: SweepResults) -> tuple[list[str], list[str], list[str]]:
    trials = results.trials
    extras = _extra_params(trials)
    metrics = _common_metrics(trials)
    costs = [c for c in _TABLE_COSTS if any(measured(getattr(t.costs, c, None)) is not None for t in trials)]
    return extras, metrics, costs


def _md_params(t: Trial) -> str:
    p = t.params
    bits = [f"chunker {p.chunker}", f"retriever {_retriever_label(p)}", f"top_k {p.top_k}"]
    bits += [f"{k} {v}" for k, v in p.model_dump().items() if k not in _BASE_PARAMS and v is not None]
    return ", ".join(bits)


def _gate_thresholds(results: SweepResults) -> dict[str, GateVerdict]:
    """One representative verdict per gated metric (for its threshold), from any trial."""
    out: dict[str, GateVerdict] = {}
    for vs in results.verdicts.values():
        for v in vs:
            out.setdefault(v.metric, v)
    return out
