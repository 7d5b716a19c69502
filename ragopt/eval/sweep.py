"""The sweep: a client of the pipeline. Every trial is a plan (ragopt.plan) built into a Pipeline and run over
the evaluation set by the same executor `ragopt eval` uses, so metrics and latencies mean the same in both.

Shared work is never repeated: one index per (embedder, chunker), reused across runs by fingerprint; one
stage memo per sweep, so a stage that already ran on the same inputs (query embeddings, the retrievers at a
given depth, an answer from the same passages) is not run again within the sweep, and its span is reused;
whole trials' outcomes and answer scores are kept in the workspace cache, so a warm re-run of an unchanged
sweep in a fresh process only recomputes metrics. Every latency is measured at the trial's own depth.
With `executor = "ray"` the same trials run as Ray tasks over the same workspace (ragopt.eval.ray_executor).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ragopt.config import fingerprint
from ragopt.data import EvalSet, generated_note
from ragopt.errors import InputError
from ragopt.eval.gates import check_known, evaluate_gates, objective_for, select
from ragopt.eval.judged import SweepJudge
from ragopt.eval.results import COST_NAMES, DatasetInfo, Generations, ModelInfo, SweepResults, Trial, Versions
from ragopt.eval.runner import best_per_doc, write_contexts, write_trec
from ragopt.eval.race import fresh_generations
from ragopt.eval.search import optuna_search
from ragopt.eval.space import BaselineConfig, SweepConfig  # noqa: F401  (re-exported: the sweep's config lives here too)
from ragopt.eval.trials import TrialRunner, score_trial
from ragopt.plan import PlanConfig, check_plans
from ragopt.train.resolve import resolve_trained_models

PER_QUERY_ALWAYS = ("ndcg@10", "recall@10")
# kept per query where the sweep answers: what a race's pick is compared with the grid's on
PER_QUERY_ANSWERS = ("citation_precision", "answer_contains_reference")


@dataclass
class SweepOutcome:
    results: SweepResults
    latencies: dict[str, list[float]] = field(default_factory=dict)  # trial id -> per-query ms
    reasons: dict[str, list[str]] = field(default_factory=dict)  # failing trial id -> why
    seconds: float = 0.0
    plans: dict[str, PlanConfig] = field(default_factory=dict)  # trial id -> what it ran
    config: SweepConfig | None = None  # the config that ran: "trained:SPLIT" models replaced by their folders


def _check_answer_metrics(names: list[str]) -> None:
    """Before any work: the metrics exist, need nothing the sweep cannot give, and ragas is installed."""
    import importlib.util

    from ragopt.eval.answers import CONTEXT_METRICS, check_metrics

    for name in check_metrics(names):
        if name in CONTEXT_METRICS:
            raise InputError(f"{name} needs reference contexts, which a sweep's answers do not carry", field="answer_metrics")
    if importlib.util.find_spec("ragas") is None:
        raise InputError("answer metrics need ragas: pip install 'ragopt[answers]'", field="answers")


def _check_before_work(evalset: EvalSet, config: SweepConfig, progress: bool) -> tuple[list[str], list[Any], Any]:
    """Everything checkable before any work: metrics, gates, each plan's files and models, the judge, Ray.
    Returns (metric names, gates, judge or None)."""
    with_spans = any(q.evidence and any(e.start is not None for e in q.evidence) for q in evalset.queries)
    with_references = any(q.reference_answer for q in evalset.queries)
    names = config.metric_names(with_spans, with_references, any(q.live_reference for q in evalset.queries))
    if config.answers_on() and with_references and config.answer_metrics:  # none asked: ragas is not needed
        _check_answer_metrics(config.answer_metrics)
    gates = check_known(config.gates, names + list(COST_NAMES))
    check_plans([plan for _, plan in config.plans()])  # a bad file, model or budget named by a stage: before any work
    judge = SweepJudge.prepare(config, config.plans(), len(evalset.queries),
                               sum(1 for q in evalset.queries if q.reference_answer), progress)  # before any work too
    if config.executor == "ray":
        from ragopt.backends.ray_cluster import require_ray

        require_ray()
    config.races(config.plans())  # --race with nothing to race: before any work
    return names, gates, judge


def run_sweep(
    evalset: EvalSet,
    config: SweepConfig,
    workspace: Path,
    *,
    progress: bool = True,
    runs_dir: Path | None = None,
    contexts_dir: Path | None = None,
    remeasure: bool = False,
    resources: Any = None,
    on_trial: Callable[[Trial, list[Any]], None] | None = None,
) -> SweepOutcome:
    """Run every trial (the grid, or an Optuna sample of it); with `runs_dir`, also write each trial's
    ranking as a TREC run file there; with `contexts_dir`, each trial's passages as they reach the prompt
(`TRIAL_ID.jsonl`, ragopt.eval.runner.write_contexts). Outcomes measured by an earlier run of the same sweep on this machine
    are reused (costs say `latency_cached`) unless `remeasure`. `on_trial(trial, outcomes)` sees each trial
    scored in this process (not on Ray), its outcomes in query order (`trace` None where reused)."""
    from ragopt.resources import Resources

    t_start = time.perf_counter()
    names, gates, judge = _check_before_work(evalset, config, progress)
    requested = config
    config = resolve_trained_models(config, workspace, progress=progress)  # trains what the workspace lacks
    plans = config.plans()
    keep = set(PER_QUERY_ALWAYS) | {g.metric for g in gates if g.metric in names} | set(config.baseline.metrics if config.baseline and config.baseline.metrics else [])
    keep |= {n for n in PER_QUERY_ANSWERS if n in names}
    own_resources = resources is None
    resources = resources or Resources()
    runner = TrialRunner(evalset, config, workspace, resources, progress=progress, remeasure=remeasure)
    runner.judge = judge
    recorded = _Recorded(runs_dir, contexts_dir)
    try:
        summary = _run_trials(plans, runner, config, names, keep, gates, recorded, on_trial, progress)
    finally:
        runner.close()
        if judge is not None:
            judge.close()
        if own_resources:
            resources.close()
    selected, reasons = select(recorded.trials, gates)
    results = _results(evalset, requested, config, runner.embedder(plans[0][1]), gates, recorded.trials, selected)
    results.generations = recorded.generations if config.answers_on() else None
    results.race = summary
    return SweepOutcome(results, recorded.latencies, reasons, time.perf_counter() - t_start, recorded.plans, config)


@dataclass
class _Recorded:
    """What the sweep's trials leave, in the order they are recorded: each trial, the plan it ran, its per-query
    latencies, the generations its answers made, and its rankings as a TREC run file (`runs_dir`) and its passages
    as they reach the prompt (`contexts_dir`)."""

    runs_dir: Path | None
    contexts_dir: Path | None
    trials: list[Trial] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    plans: dict[str, PlanConfig] = field(default_factory=dict)
    generations: Generations = field(default_factory=Generations)

    def __call__(self, tid: str, plan: PlanConfig, trial: Trial, ms: list[float], rankings: Any,
                 made: Generations | None = None) -> Trial:
        self.trials.append(trial)
        self.plans[tid] = plan
        self.latencies[tid] = ms
        if made is not None:
            self.generations = self.generations.plus(made)
        if self.runs_dir is not None:
            write_trec(self.runs_dir / f"{tid}.trec", tid, (
                (qid, best_per_doc((doc, score) for _, doc, _, _, score in ranking)) for qid, ranking in rankings))
        if self.contexts_dir is not None:
            write_contexts(self.contexts_dir / f"{tid}.jsonl", rankings)
        return trial


def _run_trials(plans: list[Any], runner: TrialRunner, config: SweepConfig, names: list[str], keep: set[str],
                gates: list[Any], recorded: _Recorded, on_trial: Any, progress: bool) -> Any:
    """Every trial, raced or by the configured executor and search, into `recorded`; the race's summary, or None."""
    if config.races(plans):
        from ragopt.eval.race_trials import race_trials

        summary = race_trials(plans, runner, config, names, keep, gates, recorded, on_trial, progress)
        recorded.generations = summary.generations
        return summary
    queries = [q.query for q in runner.evalset.queries]

    def evaluate(tid: str, plan: PlanConfig) -> Trial:
        outcomes, index = runner.run(plan, queries, tid)
        trial = score_trial(tid, plan, outcomes, index, runner.evalset, config, names, keep, runner.cache, runner.judge)
        if on_trial is not None:
            on_trial(trial, outcomes)
        return recorded(tid, plan, trial, [o.ms for o in outcomes], [(o.query_id, o.ranking) for o in outcomes],
                        fresh_generations(outcomes))

    _dispatch(plans, runner, config, names, keep, gates, recorded, evaluate,
              rankings=recorded.runs_dir is not None or recorded.contexts_dir is not None, progress=progress)
    return None


def _dispatch(plans: list[Any], runner: TrialRunner, config: SweepConfig, names: list[str], keep: set[str], gates: list[Any],
              record: Any, evaluate: Any, *, rankings: bool, progress: bool) -> None:
    """The trials, by the configured executor and search: the grid in order, an Optuna sample, or Ray tasks."""
    from ragopt.progress import progress_bar

    max_trials = config.max_trials or max(1, len(plans) // 4)
    if config.executor == "ray":  # the same trials as Ray tasks (ragopt.eval.ray_executor)
        from ragopt.eval.ray_executor import run_on_ray

        run_on_ray(plans, runner, config, names, keep, gates, record, max_trials=max_trials, rankings=rankings, progress=progress)
    elif config.search == "grid":
        for tid, plan in progress_bar(plans, desc="trials", unit="trial", disable=not progress):
            evaluate(tid, plan)
    else:
        optuna_search(plans, evaluate, gates, max_trials=max_trials, seed=config.seed, progress=progress)


def _results(evalset: EvalSet, requested: SweepConfig, config: SweepConfig, embedder: Any, gates: list[Any],
             trials: list[Trial], selected: Trial | None) -> SweepResults:
    """results.json: the trials with what they were measured on (`requested`: the config as the user wrote it)."""
    from ragopt.tokencount import token_counter

    qrels = {q.query.id: q.relevance for q in evalset.queries}
    counter = token_counter(config.context_tokenizer, config.embedder)
    return SweepResults(
        dataset=DatasetInfo(
            name=evalset.name, path=evalset.source,
            fingerprint=fingerprint([d.model_dump(mode="json") for d in evalset.documents]) + ":" + fingerprint(qrels),
            n_documents=len(evalset.documents), n_queries=len(evalset.queries), generated=generated_note(evalset.source),
        ),
        versions=Versions.collect(),
        models={
            "embedder": ModelInfo(name=config.embedder.model, fingerprint=embedder.fingerprint),
            "context_tokenizer": ModelInfo(name=counter.name, fingerprint=counter.fingerprint),
        },
        search_space=requested.model_dump(mode="json", exclude={"baseline", "store", "executor", "ray_address"}),
        objective=objective_for(gates),
        gates=[g.expr for g in gates],
        trials=trials,
        selected=selected.id if selected else None,
        verdicts={t.id: _verdicts(t, gates, config.seed) for t in trials},
        query_ids=[q.query.id for q in evalset.queries],
    )


def _verdicts(trial: Trial, gates: list[Any], seed: int) -> list[Any]:
    """Gate verdicts that say when a pass is within noise, and when a latency gate read a latency measured
    by an earlier run (re-measure with --remeasure)."""
    from ragopt.eval.heldout import mark_noise

    verdicts = mark_noise(evaluate_gates(trial, gates), trial, gates, seed)
    if getattr(trial.costs, "latency_cached", False):
        verdicts = [v.model_copy(update={"message": v.message + " (latency measured by an earlier run on this machine)"})
                    if v.metric.endswith("_ms") else v for v in verdicts]
    return verdicts


def confirm(outcome: SweepOutcome, report_set: EvalSet, workspace: Path, *, split: str,
            selection_split: str, progress: bool = True) -> None:
    """Run the selected trial's plan on the report split and record it as `results.held_out`."""
    from ragopt.eval.heldout import held_out
    from ragopt.resources import Resources

    results, config = outcome.results, outcome.config
    if results.selected is None:
        return
    plan = outcome.plans[results.selected]
    with_spans = any(q.evidence and any(e.start is not None for e in q.evidence) for q in report_set.queries)
    names = config.metric_names(with_spans, any(q.reference_answer for q in report_set.queries),
                                any(q.live_reference for q in report_set.queries))
    with Resources() as resources:
        runner = TrialRunner(report_set, config, workspace, resources, progress=progress, remeasure=False)
        try:
            outcomes, index = runner.run(plan, [q.query for q in report_set.queries], "held-out")
            confirmed = score_trial(results.selected, plan, outcomes, index, report_set, config, names, set(names), runner.cache)
        finally:
            runner.close()
    selected = results.selected_trial
    shared = [n for n in names if n in selected.per_query]
    results.held_out = held_out(selected, confirmed, split, selection_split, shared, config.seed)
