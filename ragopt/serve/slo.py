"""Capacity under a service-level objective: `ragopt loadtest --slo "p95_ttft_ms<=2000"`.

Poisson load steps up from `start_rps`, doubling while each step meets every SLO, then bisects between the
highest rate that met them and the lowest that did not (`refine` times). Each step runs `repeats` times with
its own seed, and its figures are taken over the requests of all its repeats together: a step's p95 is the p95
of everything it observed. (Requiring each repeat to pass on its own judged a step by the worse of two noisy
15 s samples, and near the knee that moved the answer by more than the last refinement.) The answer is the
highest passing rate (`capacity_rps`) with the interval [capacity, lowest failing rate] that the search could
not split further.

Each repeat also says whether the service was over-saturated - the requests in flight at the end of the
sending window are at least 1.5x their time-average over it (and at least 3): the queue grew through the
window, so a longer run would have seen worse figures - and how well Little's law held (measured in-flight
over arrival rate x mean latency).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from ragopt.errors import InputError
from ragopt.trace import percentiles

_EXPR = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")
_OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
_LATENCIES = ("ttft_ms", "server_ttft_ms", "latency_ms", "tpot_ms", "queue_ms")
_RATE_STATUS = {"error_rate": "error", "timeout_rate": "timed_out", "rate_limited_rate": "rate_limited", "refused_rate": "refused"}
_RATES = (*_RATE_STATUS, "failed_rate")
METRICS = tuple(f"{p}_{m}" for m in _LATENCIES for p in ("p50", "p95", "p99")) + _RATES


@dataclass(frozen=True)
class Slo:
    metric: str
    op: str
    bound: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"

    def value(self, report: dict[str, Any]) -> float | None:
        if self.metric == "failed_rate":  # anything but an answer: error, timeout, 429 or 503
            return 1 - report["ok"] / report["sent"] if report["sent"] else None
        if self.metric in _RATES:
            return report[self.metric]
        pct, _, name = self.metric.partition("_")
        return report[name].get(pct)

    def met(self, report: dict[str, Any]) -> bool:
        value = self.value(report)
        return value is not None and _OPS[self.op](value, self.bound)


def parse_slo(text: str) -> Slo:
    m = _EXPR.match(text)
    if not m:
        raise InputError(f"expected METRIC<=NUMBER (or >=, <, >), e.g. p95_ttft_ms<=2000; got {text!r}", field="--slo")
    metric, op, bound = m.group(1), m.group(2), float(m.group(3))
    if metric not in METRICS:
        raise InputError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}", field="--slo")
    if bound < 0 or (metric in _RATES and bound > 1):
        raise InputError(f"{metric} bound out of range: {bound:g}", field="--slo")
    return Slo(metric, op, bound)


@dataclass(frozen=True)
class SearchPlan:
    start_rps: float = 0.1
    max_rps: float = 64.0
    repeats: int = 2
    refine: int = 3

    def check(self) -> None:
        for flag, value, low in (("--slo-start", self.start_rps, 0.0), ("--slo-max", self.max_rps, self.start_rps)):
            if not value > low:
                raise InputError(f"must be > {low:g}, got {value:g}", field=flag)
        if self.repeats < 1:
            raise InputError(f"must be >= 1, got {self.repeats}", field="--repeats")
        if self.refine < 0:
            raise InputError(f"must be >= 0, got {self.refine}", field="--refine")


def saturated(report: dict[str, Any]) -> bool:
    ll = report["littles_law"]
    return ll["in_flight_at_close"] >= max(3.0, 1.5 * ll["measured_in_flight"])


def pooled(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The SLO figures of one step over the requests of all its repeats (each report lists its `requests`)."""
    requests = [r for report in reports for r in report["requests"]]
    answered = [r for r in requests if r["status"] == "ok"]
    n = max(len(requests), 1)
    out: dict[str, Any] = {name: percentiles(r[name] for r in answered if r.get(name) is not None) for name in _LATENCIES}
    out |= {rate: sum(r["status"] == status for r in requests) / n for rate, status in _RATE_STATUS.items()}
    return out | {"sent": sum(report["sent"] for report in reports), "ok": len(answered)}


def _repeat_row(report: dict[str, Any], slos: Sequence[Slo]) -> dict[str, Any]:
    ratio = report["littles_law"]["ratio"]
    return {"seed_report": {k: report[k] for k in ("sent", "ok", "rate_limited", "refused", "timed_out", "errors", "offered_qps", "achieved_qps")},
            "values": {str(s): s.value(report) for s in slos}, "met": all(s.met(report) for s in slos),
            "saturated": saturated(report), "littles_law_ratio": ratio,
            "littles_law_ok": ratio is not None and abs(ratio - 1) <= 0.1}


def search_capacity(spec: Any, slos: Sequence[Slo], plan: SearchPlan, run_step: Callable[[Any], dict[str, Any]],
                    progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """`run_step(spec)` runs one Poisson load (spec.rate set) and returns its report."""
    steps: list[dict[str, Any]] = []

    def step(rate: float) -> bool:
        reports = [run_step(replace(spec, rate=rate, seed=spec.seed + 7919 * k)) for k in range(plan.repeats)]
        rows = [_repeat_row(report, slos) for report in reports]
        together = pooled(reports)
        ok = all(s.met(together) for s in slos)
        values = {str(s): s.value(together) for s in slos}
        steps.append({"rate_rps": rate, "met": ok, "values": values, "saturated": any(r["saturated"] for r in rows), "repeats": rows})
        progress(f"{rate:.3g} req/s: {'meets' if ok else 'misses'} the SLO over {plan.repeats} run(s)"
                 + "".join(f"; {k} {v if v is None else round(v, 3)}" for k, v in values.items()))
        return ok

    best, worst = None, None
    rate = plan.start_rps
    while rate <= plan.max_rps:
        if not step(rate):
            worst = rate
            break
        best, rate = rate, rate * 2
    for _ in range(4):  # the start rate misses: halve it, down to 1/16 of it
        if best is not None or worst is None:
            break
        if step(worst / 2):
            best = worst / 2
        else:
            worst = worst / 2
    for _ in range(plan.refine):
        if best is None or worst is None:
            break
        mid = (best + worst) / 2
        if step(mid):
            best = mid
        else:
            worst = mid
    at_best = [s for s in steps if s["rate_rps"] == best]
    return {"capacity_rps": best or 0.0, "interval_rps": [best or 0.0, worst], "slo": [str(s) for s in slos],
            "capped_at_max": worst is None, "saturated_at_capacity": bool(at_best and at_best[0]["saturated"]),
            "littles_law_within_10pct": all(r["littles_law_ok"] for s in steps for r in s["repeats"]), "steps": steps}
