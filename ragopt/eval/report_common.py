"""What the sweep's outputs share: value formatting, column choices (the stages whose own latency is shown,
citation precision beside its floor), trial labels and order, the closest trial to passing and the Pareto
front. The CLI table reads the same columns. Used by report_summary (markdown), report_plots (figures), report_html (page)
and report (CSV and writing every output)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from ragopt.eval.gates import objective_key, quality_metric, rank_trials
from ragopt.eval.results import GateVerdict, HeldOut, Interval, SweepResults, Trial, TrialParams, measured

Latencies = Mapping[str, Sequence[float]]  # trial id -> per-query retrieval ms

_METRIC_ORDER = ("recall", "ndcg", "mrr", "precision", "hit", "span_recall", "chars_recall", "chars_precision", "chars_iou")
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


def chars_columns(quality: str) -> list[str]:
    """The character metrics shown beside the quality metric, at its K (at 10 when it names none): how much of
    what reaches the prompt is evidence."""
    m = _K_RE.match(quality)
    k = m.group(2) if m else "10"
    return [f"chars_recall@{k}", f"chars_iou@{k}"]


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
    return not t.dropped and all(v.passed for v in _verdicts(results, t))


def race_note(t: Trial) -> str | None:
    """Why and when a race dropped `t`, and on how many questions its answer figures are (None: not dropped)."""
    if not t.dropped:
        return None
    when = "by screening, never answered" if t.race.round == 0 else (
        f"in round {t.race.round}, answer figures on {t.race.answered} of {t.race.questions} questions")
    return f"dropped {when}: {t.race.reason}"


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


# ---------------------------------------------------------------------------------------------- added latency, citation floor, noise

_STAGE_MS = re.compile(r"^(?P<stage>.+)_(?P<pct>p50|p95)_ms$")
STAGE_PERCENTILES = ("p50", "p95")


def swept_params(trials: Sequence[Trial]) -> list[str]:
    """Params that take more than one value across the trials (absent counts as a value)."""
    dumps = [t.params.model_dump() for t in trials]
    keys = dict.fromkeys(k for d in dumps for k in d)
    return [k for k in keys if len({repr(d.get(k)) for d in dumps}) > 1]


def trial_stages(t: Trial) -> list[str]:
    """The stages whose own latency the trial measured (costs `{stage}_p50_ms`, `{stage}_p95_ms`), in pipeline order."""
    return list(dict.fromkeys(
        m.group("stage") for k, v in t.costs.model_dump().items() if (m := _STAGE_MS.match(k)) and measured(v) is not None
    ))


def switched_stages(trials: Sequence[Trial]) -> set[str]:
    """The stages a swept parameter switches on and off: missing from some trials, and named by a swept parameter's
    kind (tool.call -> tool; its step after the answer, tool_answer, too)."""
    ran = [set(trial_stages(t)) for t in trials]
    kinds = {p.split(".", 1)[0] for p in swept_params(trials) if "." in p}
    return {s for s in set().union(*ran) if any(s not in r for r in ran) and any(s.startswith(k) for k in kinds)}


def stage_latency_columns(trials: Sequence[Trial]) -> list[str]:
    """The stages whose own p50/p95 the tables show (what the stage adds): a stage missing from some trials
    (e.g. a rerank stage only where its depth is above 0), or one a swept parameter names: the parameter's
    kind (before the dot) is the stage's name or starts with it (rerank_maxsim.depth -> rerank_maxsim,
    embedder -> embed). Derived from the trials, in pipeline order; none when there is one trial."""
    if len(trials) < 2:
        return []
    runs: dict[str, int] = {}
    for t in trials:
        for stage in trial_stages(t):
            runs[stage] = runs.get(stage, 0) + 1
    kinds = {p.split(".", 1)[0] for p in swept_params(trials)}
    return [s for s, n in runs.items() if n < len(trials) or any(k == s or k.startswith(s) for k in kinds)]


def stage_ms(t: Trial, stage: str, pct: str) -> float | None:
    return measured(t.costs.model_dump().get(f"{stage}_{pct}_ms"))


_FLOOR_PREFIX = "citation_floor_"
# answer figures whose floor is named otherwise: the lead of the top passage cut to the answer's length
_ANSWER_FLOORS = {"answer_lead_contains_reference": "answer_contains_reference"}
BELOW_FLOOR = "not above floor"
FLOORS_TEXT = ("Citation precision is beside its floor, what always citing [1] (the top passage) scores, and "
               "answer-contains-reference beside the lead of the top passage cut to the answer's length")


def floor_pairs(trials: Sequence[Trial]) -> list[tuple[str, str]]:
    """(figure, floor) metric pairs some trial measured: `citation_floor_X` is what always citing [1] (the top
    passage) would score on `citation_X`; `answer_lead_contains_reference` is whether the top passage's lead,
    as long as the answer, contains the reference."""
    names = dict.fromkeys(k for t in trials for k in t.metrics)
    pairs = [("citation_" + n[len(_FLOOR_PREFIX):], n) for n in names if n.startswith(_FLOOR_PREFIX)]
    pairs += [(figure, floor) for floor, figure in _ANSWER_FLOORS.items() if floor in names]
    return [(p, f) for p, f in pairs if any(measured(t.metrics.get(p)) is not None for t in trials)]


def floor_label(figure: str) -> str:
    """"citation_span_precision" -> "citation span precision"."""
    return figure.replace("_", " ")


@lru_cache(maxsize=4096)
def _interval_above_zero(figure: tuple[float | None, ...], floor: tuple[float | None, ...]) -> bool:
    from ragopt.eval.bootstrap import paired_bootstrap_ci

    try:
        return paired_bootstrap_ci(figure, floor).low > 0
    except ValueError:  # no query scored both ways
        return False


def beats_floor(t: Trial, figure: str, floor: str) -> bool | None:
    """Whether the trial's figure is above its floor beyond noise: the paired bootstrap interval (95%, seeded) of
    the per-query difference lies above zero. None when either was not measured."""
    p, f = measured(t.metrics.get(figure)), measured(t.metrics.get(floor))
    if p is None or f is None:
        return None
    if figure not in t.per_query or floor not in t.per_query:  # results without per-query figures: the means alone
        return p > f
    return _interval_above_zero(tuple(t.per_query[figure]), tuple(t.per_query[floor]))


def with_floor(t: Trial, precision: str, floor: str) -> str:
    """"0.480 (floor 0.310)"; the bare precision when the floor was not measured, "" when neither was."""
    p, f = measured(t.metrics.get(precision)), measured(t.metrics.get(floor))
    if p is None:
        return ""
    return f"{p:.3f}" if f is None else f"{p:.3f} (floor {f:.3f})"


def noisy_gates(results: SweepResults, t: Trial) -> list[GateVerdict]:
    """The trial's gates that pass only within noise (the metric's interval straddles the threshold)."""
    return [v for v in _verdicts(results, t) if v.passed and v.within_noise]


def fmt_interval(interval: Interval | None) -> str:
    """"0.812 [0.790, 0.833]": a mean and its bootstrap interval; "" when there is none."""
    return "" if interval is None else f"{interval.mean:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def held_out_rows(h: HeldOut) -> list[tuple[str, Interval | None, Interval | None, bool | None]]:
    """(metric, selection interval, held-out interval, overfit) per metric with an interval on either split."""
    names = dict.fromkeys([*h.intervals, *h.selection_intervals])
    return [(n, h.selection_intervals.get(n), h.intervals.get(n), h.overfit.get(n)) for n in names]


JUDGE_COSTS = ("judge_calls", "judge_cached", "judge_failures", "judge_tokens", "judge_seconds", "judge_cost_usd")


def judged_trials(results: SweepResults) -> list[tuple[Trial, dict[str, Interval], dict[str, Any]]]:
    """(trial, judged metric -> interval, judge costs) for every trial a judge scored, in results order."""
    out = []
    for t in results.trials:
        costs = t.costs.model_dump()
        if costs.get("judge_calls") is None:
            continue
        out.append((t, dict(t.intervals), {k: costs.get(k) for k in JUDGE_COSTS}))
    return out


def judge_cost_text(costs: dict[str, Any]) -> str:
    """"12 calls (30 cached), 0 failures, 5,210 tokens, 14.2 s, $0.0000"."""
    return (f"{costs['judge_calls']} calls ({costs['judge_cached']} cached), {costs['judge_failures']} failures, "
            f"{costs['judge_tokens']:,} tokens, {costs['judge_seconds']:.1f} s, ${costs['judge_cost_usd']:.4f}")
