"""A race (ragopt.eval.race) over a sweep's trials, run by the sweep's own runner: in this process, or with the
answering rounds as Ray tasks (`--executor ray`); over the whole grid, or over an Optuna sample of it whose
sampler is told each trial's screening (its retrieval figures and context tokens: no answer is made to sample)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from ragopt.eval.race import MEASURED, RaceContext, dropped_trial, measured_trial, race, retrieval_names, screened
from ragopt.eval.results import RaceSummary, Trial
from ragopt.eval.trials import TrialRunner, score_trial
from ragopt.plan import PlanConfig
from ragopt.stages.spec import PROMPT_SLOT


def race_trials(plans: list[tuple[str, PlanConfig]], runner: TrialRunner, config: Any, names: list[str], keep: set[str],
                gates: list[Any], record: Any, on_trial: Any, progress: bool) -> RaceSummary:
    """Race `plans` (or an Optuna sample of them) and record every trial in plan order; returns the race's summary."""
    queries = [q.query for q in runner.evalset.queries]
    query_ids = [q.id for q in queries]
    ctx = RaceContext(gates=gates, n_questions=len(queries), confidence=config.race_confidence, seed=config.seed)

    def score(tid: str, plan: PlanConfig, outcomes: list[Any], index: Any, over: list[str]) -> Trial:
        return score_trial(tid, plan, outcomes, index, runner.evalset, config, over, set(over), runner.cache, runner.judge)

    def screen(tid: str, plan: PlanConfig) -> tuple[list[Any], Any]:
        return runner.run(plan, queries, f"{tid} (screening)", last_slot=PROMPT_SLOT)

    if config.search == "optuna":
        plans = _optuna_sample(plans, screen, score, names, gates, config, progress)
    with _batches(runner, config, plans) as run_batch:
        standings, summary = race(plans, queries, ctx, config, names, screen=screen, run_batch=run_batch, score=score,
                                  progress=progress)
    for s in standings:
        answered = [s.answered[qid] for qid in query_ids if qid in s.answered]
        if s.status == MEASURED:
            trial = measured_trial(s, score_trial(s.tid, s.plan, answered, s.index, runner.evalset, config, names, keep,
                                                  runner.cache, runner.judge), ctx)
        else:
            trial = dropped_trial(s, ctx, query_ids, keep, names)
        if on_trial is not None:
            on_trial(trial, answered)
        record(s.tid, s.plan, trial, [o.ms for o in answered], [(o.query_id, o.ranking) for o in s.screen_outcomes])
    return summary


def _optuna_sample(plans: list[tuple[str, PlanConfig]], screen: Any, score: Any, names: list[str], gates: list[Any],
                   config: Any, progress: bool) -> list[tuple[str, PlanConfig]]:
    """The trials Optuna's TPE samples (`max_trials`, seeded), told each one's screening, in plan order."""
    from ragopt.eval.search import optuna_search

    retrieval = retrieval_names(names)
    sampled: set[str] = set()

    def evaluate(tid: str, plan: PlanConfig) -> Trial:
        sampled.add(tid)
        outcomes, index = screen(tid, plan)
        return screened(score(tid, plan, outcomes, index, retrieval), retrieval)

    optuna_search(plans, evaluate, gates, max_trials=config.max_trials or max(1, len(plans) // 4), seed=config.seed,
                  progress=progress)
    return [(tid, plan) for tid, plan in plans if tid in sampled]


def _batches(runner: TrialRunner, config: Any, plans: list[tuple[str, PlanConfig]]) -> Any:
    """A context giving the race's answering runs: this process's runner, or Ray tasks."""
    if config.executor == "ray":
        from ragopt.eval.ray_executor import race_batches

        return race_batches(runner, config, plans)
    return nullcontext(lambda items: [runner.run(s.plan, qs, s.tid)[0] for s, qs in items])
