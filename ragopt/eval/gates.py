"""Quality gates (`recall@10>=0.9`, `p95_ms<=50`) and the selection of the cheapest trial that passes them all.

A gate is METRIC OP NUMBER, OP one of >=, <=, >, <; METRIC is any key of a trial's metrics or costs
(`Trial.values()`). Selection objective, printed with every result (`objective_for`): among the trials that
pass every gate, the lowest context_tokens, then the lowest p95_ms, then the highest quality, where quality
is the metric of the first lower-bound gate on a non-cost metric (else ndcg@10); remaining ties by trial id.
A cost that was not measured sorts last.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragopt.errors import InputError
from ragopt.eval.results import COST_NAMES, GateVerdict, Trial, measured

OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
}
DEFAULT_QUALITY = "ndcg@10"
OBJECTIVE_TEMPLATE = (
    "cheapest passing trial: lowest context_tokens, then lowest p95_ms, then highest {quality}; ties by trial id"
)
OBJECTIVE = OBJECTIVE_TEMPLATE.format(quality=f"quality (the first quality gate's metric, else {DEFAULT_QUALITY})")

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_GATE_RE = re.compile(rf"^\s*([A-Za-z_][A-Za-z0-9_.]*(?:@\d+)?)\s*(>=|<=|>|<)\s*({_NUMBER})\s*$")
_COST_SUFFIXES = ("_ms", "_s", "_bytes", "_tokens")


def fmt(x: float) -> str:
    """A short, readable number: 0.842, 62.13, 1,543.2, 120,000."""
    if abs(x) >= 1000:
        return f"{x:,.1f}".removesuffix(".0")
    return f"{x:.4g}"


def is_cost(name: str) -> bool:
    """Costs are lower-is-better: the documented costs, and anything named *_ms, *_s, *_bytes, *_tokens."""
    return name in COST_NAMES or name.endswith(_COST_SUFFIXES)


@dataclass(frozen=True)
class Gate:
    metric: str
    op: str
    threshold: float
    expr: str  # normalized, e.g. "recall@10>=0.9"

    @classmethod
    def parse(cls, expr: str) -> "Gate":
        m = _GATE_RE.match(expr) if isinstance(expr, str) else None
        if not m:
            raise InputError(
                f"bad gate {expr!r}: expected METRIC OP NUMBER with OP one of >=, <=, >, < "
                "(e.g. recall@10>=0.9, p95_ms<=50)",
                field="gate",
            )
        metric, op, number = m.group(1).lower(), m.group(2), m.group(3)
        return cls(metric=metric, op=op, threshold=float(number), expr=f"{metric}{op}{number}")

    def __str__(self) -> str:
        return self.expr

    def evaluate(self, values: Mapping[str, Any]) -> GateVerdict:
        """The verdict against a trial's metrics and costs; an unknown metric is an InputError listing known names."""
        if self.metric not in values:
            raise InputError(
                f"gate {self.expr!r}: unknown metric {self.metric!r}; known: {', '.join(sorted(values))}",
                field="gate",
            )
        raw = values[self.metric]
        observed = measured(raw)
        needs = f"needs {self.op} {fmt(self.threshold)}"
        if observed is None:
            return GateVerdict(
                gate=self.expr, metric=self.metric, op=self.op, threshold=self.threshold, observed=None,
                passed=False, margin=None, message=f"{self.metric} was not measured, {needs}",
            )
        passed = OPS[self.op](observed, self.threshold)
        margin = observed - self.threshold if self.op in (">=", ">") else self.threshold - observed
        head = f"{self.metric} = {fmt(observed)}, {needs}"
        if passed:
            message = f"{head}, passes by {fmt(margin)}" if margin else f"{head}, passes (at the threshold)"
        elif margin == 0:
            message = f"{head}, fails: equal to the threshold"
        else:
            message = f"{head}, {'short' if self.op in ('>=', '>') else 'over'} by {fmt(-margin)}"
        return GateVerdict(
            gate=self.expr, metric=self.metric, op=self.op, threshold=self.threshold, observed=observed,
            passed=passed, margin=margin, message=message,
        )


GateLike = str | Gate


def parse_gates(exprs: Sequence[GateLike]) -> list[Gate]:
    return [g if isinstance(g, Gate) else Gate.parse(g) for g in exprs]


def check_known(gates: Sequence[GateLike], known: Sequence[str]) -> list[Gate]:
    """Fail early, before a sweep runs, on a gate naming a metric the sweep will not produce."""
    parsed = parse_gates(gates)
    for g in parsed:
        if g.metric not in known:
            raise InputError(
                f"gate {g.expr!r}: unknown metric {g.metric!r}; known: {', '.join(sorted(known))}", field="gate"
            )
    return parsed


def evaluate_gates(trial: Trial, gates: Sequence[GateLike]) -> list[GateVerdict]:
    values = trial.values()
    return [g.evaluate(values) for g in parse_gates(gates)]


def quality_metric(gates: Sequence[GateLike]) -> str:
    for g in parse_gates(gates):
        if g.op in (">=", ">") and not is_cost(g.metric):
            return g.metric
    return DEFAULT_QUALITY


def objective_for(gates: Sequence[GateLike]) -> str:
    """The objective in words, with the quality metric these gates imply."""
    return OBJECTIVE_TEMPLATE.format(quality=quality_metric(gates))


def objective_key(trial: Trial, quality: str) -> tuple[float, float, float, str]:
    """Sort key: smaller is better. Unmeasured values sort last."""
    ct, p95, q = measured(trial.costs.context_tokens), measured(trial.costs.p95_ms), measured(trial.metrics.get(quality))
    return (
        math.inf if ct is None else ct,
        math.inf if p95 is None else p95,
        math.inf if q is None else -q,
        trial.id,
    )


def rank_trials(
    trials: Sequence[Trial], gates: Sequence[GateLike], verdicts: Mapping[str, Sequence[GateVerdict]] | None = None
) -> list[Trial]:
    """Passing trials first, each group in objective order."""
    if verdicts is None:
        verdicts = {t.id: evaluate_gates(t, gates) for t in trials}
    quality = quality_metric(gates)
    return sorted(  # a trial a race dropped last: its answer figures cover only the questions it answered
        trials,
        key=lambda t: (t.dropped, not all(v.passed for v in verdicts.get(t.id, [])), objective_key(t, quality)),
    )


def select(
    trials: Sequence[Trial], gates: Sequence[GateLike]
) -> tuple[Trial | None, dict[str, list[str]]]:
    """The cheapest trial passing every gate (None if none does), and for each failing trial why it failed. A trial
    a race dropped is never selected (its reason is the race's)."""
    parsed = parse_gates(gates)
    verdicts = {t.id: evaluate_gates(t, parsed) for t in trials}
    reasons = {tid: [v.message for v in vs if not v.passed] for tid, vs in verdicts.items()}
    reasons.update({t.id: [f"dropped by the race in round {t.race.round}: {t.race.reason}"] for t in trials if t.race and t.dropped})
    reasons = {tid: msgs for tid, msgs in reasons.items() if msgs}
    passing = [t for t in trials if t.id not in reasons]
    quality = quality_metric(parsed)
    best = min(passing, key=lambda t: objective_key(t, quality)) if passing else None
    return best, reasons
