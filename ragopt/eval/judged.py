"""Judged metrics inside a sweep (`ragopt sweep --judge ...`): faithfulness, answer correctness and context
relevance per trial, with bootstrap intervals, the unsupported sentences per query, and what judging cost.

Before any work the number of judge calls is projected and, with `max_calls`, a run that would need more is
refused (one line naming --judge-max-calls). The projection is a floor before cache hits: one verdict per
answer (it has at least one sentence) for faithfulness, one for context relevance, one for correctness
where the query has a reference, in every trial that answers. The same budget is enforced as the run goes:
a trial whose new calls would pass it is refused before its first call (verdicts made so far stay cached).

The passages judged are the trial's ranked chunks (title and text), the hits its generator was given
(before the prompt's own passage limit and token budget).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

from ragopt.errors import InputError
from ragopt.judge.judges import Judge, JudgeConfig, make_judge
from ragopt.judge.judging import METRICS, JudgeItem, judge_items
from ragopt.resources import Resources


def project_calls(plans: Sequence[tuple[str, Any]], n_queries: int, n_references: int) -> int:
    """The fewest judge calls the sweep can need before cache hits (see the module docstring)."""
    per_trial = 2 * n_queries + n_references
    return per_trial * sum(1 for _, plan in plans if plan.generates())


@dataclass
class JudgedTrial:
    per_query: dict[str, list[float | None]]
    costs: dict[str, float | int]
    intervals: dict[str, Any]
    unsupported: dict[str, list[str]]


@dataclass
class SweepJudge:
    """One judge for the whole sweep, with the run's call budget."""

    config: JudgeConfig
    judge: Judge
    resources: Resources
    calls_left: int | None = None
    progress: bool = False

    @classmethod
    def prepare(cls, config: Any, plans: Sequence[tuple[str, Any]], n_queries: int, n_references: int,
                progress: bool = False) -> "SweepJudge | None":
        """Before any work: the judge exists and answers, and the projected calls fit `max_calls`."""
        judging = config.judge
        if not judging.on():
            return None
        if not config.answers_on():
            raise InputError("a judge needs answers: add [stages.generate] generator = ... (or --set generate.generator=...)",
                             field="--judge")
        if config.executor == "ray":
            raise InputError("judged metrics run with the local executor", field="--judge")
        projected = project_calls(plans, n_queries, n_references)
        resources = Resources()
        try:
            judge = make_judge(judging, resources, model_field="--judge-model")
        except BaseException:
            resources.close()
            raise
        if judging.max_calls is not None and projected > judging.max_calls:
            resources.close()
            raise InputError(f"at least {projected} judge calls are projected, more than the {judging.max_calls} allowed",
                             field="--judge-max-calls")
        print(f"judge {judge.name}: at least {projected} judge calls projected before cache hits "
              f"(one per answer sentence, plus context relevance and correctness)", file=sys.stderr, flush=True)
        return cls(judging, judge, resources, calls_left=judging.max_calls, progress=progress)

    def score(self, trial_id: str, outcomes: Sequence[Any], evalset: Any, index: Any, cache: Any) -> JudgedTrial:
        from ragopt.eval.heldout import mean_interval

        chunks = {c.id: c for c in index.chunks}
        references = {q.query.id: q.reference_answer for q in evalset.queries}
        questions = {q.query.id: q.query.text for q in evalset.queries}
        items: list[JudgeItem] = []
        for o in outcomes:
            text = (o.answer or {}).get("text") or ""
            ids = list(dict.fromkeys(cid for cid, *_ in o.ranking))
            passages = tuple(" ".join(x for x in (chunks[c].title, chunks[c].text) if x) for c in ids if c in chunks)
            if text.strip() and passages:
                items.append(JudgeItem(o.query_id, questions[o.query_id], passages, text, references.get(o.query_id)))
        judged, totals = judge_items(items, self.judge, cache, max_calls=self.calls_left,
                                     usd_per_million_tokens=self.config.usd_per_million_tokens,
                                     progress=self.progress, desc=f"judge {trial_id}")
        if self.calls_left is not None:
            self.calls_left -= totals.calls
        by_id = {j.id: j for j in judged}
        per_query = {name: [getattr(by_id[o.query_id], name) if o.query_id in by_id else None for o in outcomes]
                     for name in METRICS}
        costs = {"judge_calls": totals.calls, "judge_cached": totals.cached, "judge_failures": totals.failures,
                 "judge_tokens": totals.tokens, "judge_seconds": round(totals.seconds, 3), "judge_cost_usd": totals.cost_usd}
        intervals = {name: iv for name, values in per_query.items() if (iv := mean_interval(values)) is not None}
        unsupported = {j.id: j.unsupported for j in judged if j.unsupported}
        return JudgedTrial(per_query, costs, intervals, unsupported)

    def close(self) -> None:
        self.resources.close()
