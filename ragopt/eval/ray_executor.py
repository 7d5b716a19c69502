"""Sweep trials as Ray tasks: `ragopt sweep --executor ray [--address ADDR]` (pip install 'ragopt[ray]').

The driver (the `ragopt sweep` process) builds or reuses every index of the sweep in the workspace first, so
no two tasks build the same one, then sends the trials to Ray. A task opens its own `Resources` and
`TrialRunner` over the same workspace and runs its trials with the local executor's code
(`TrialRunner.run`, `score_trial`); it returns each `Trial` with its per-query latencies (and rankings when
run files are wanted). The driver records them in plan order, so `results.json` lists the same trials in
the same order, with the same metrics and selection, as the local executor; only the latencies differ
(they are measured on the worker that ran the trial, beside the other tasks).

Grid: the plans of one (embedder, chunker) come in one task, so its stage memo stays warm across them;
a group is cut into contiguous slices when there are fewer groups than CPUs in the Ray cluster.

Optuna: this is Optuna's TPE driving Ray tasks, not Ray Tune: `ragopt.eval.search.optuna_search` asks and
tells in the driver, and each batch of asked trials (as many as the cluster has CPUs) runs as one task per
trial. Ray Tune would need ray[tune] (pandas, pyarrow) and its own trial bookkeeping for the same result.

Where things must live: the workspace (indexes, embedding cache, stage memo, trial outcomes; a diskcache
is safe for several processes) at a path every worker reads and writes under the same name: on one machine
it is; on a cluster it must be a shared file system mounted at the same path on every node (vectors may
live on a Qdrant server instead, `[store] url` in the sweep config, but chunks, BM25 and caches stay in the
workspace). Every node needs ragopt and its dependencies installed: a task refuses to run under another
version of ragopt's code than the driver's (`code_fingerprint`), since cached outcomes are keyed by it.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragopt.data import EvalSet
from ragopt.errors import InputError
from ragopt.eval.results import Trial
from ragopt.eval.space import SweepConfig
from ragopt.plan import PlanConfig

INSTALL = "pip install 'ragopt[ray]'"


@dataclass
class TrialDone:
    """What a task sends back for one trial."""

    trial: Trial
    latencies: list[float]  # per-query ms
    rankings: list[tuple[str, list[tuple[str, str, int, int, float]]]] | None  # (query id, its outcome's ranking), for run files


Record = Callable[[str, PlanConfig, Trial, list[float], Any], Trial]


def require_ray(field: str = "executor", path: str | None = None) -> None:
    """Before any work: the Ray executor needs ray installed."""
    if importlib.util.find_spec("ray") is None:
        raise InputError(f"the Ray executor needs ray: {INSTALL}", path=path, field=field)


@contextmanager
def ray_session(address: str | None, num_cpus: int | None = None) -> Iterator[Any]:
    """A connected `ray` module: the session already open in this process (left open), else one started
    here and shut down on the way out: the cluster at `address` (e.g. ray://HEAD:10001, or "auto" for the
    one `ray start` runs on this machine), or without one, always a new local instance (never a cluster
    left behind in /tmp/ray by an earlier `ray start`, which plain `ray.init()` would join)."""
    import ray

    if ray.is_initialized():
        yield ray
        return
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def run_trials(evalset: EvalSet, config: SweepConfig, workspace: str, names: list[str], keep: set[str],
               todo: list[tuple[str, PlanConfig]], code: str, rankings: bool) -> list[TrialDone]:
    """A Ray task's body: `todo`'s trials, in order, with the local executor's runner and scoring."""
    from ragopt.eval.executor import code_fingerprint
    from ragopt.eval.trials import TrialRunner, score_trial
    from ragopt.resources import Resources

    if code_fingerprint() != code:
        import ragopt

        raise InputError(f"a Ray worker runs other ragopt code ({ragopt.__file__}, {code_fingerprint()}) than this "
                         f"driver ({code}): install the same ragopt on every node", field="executor")
    path = Path(workspace)
    queries = [q.query for q in evalset.queries]
    done = []
    with Resources() as resources:
        runner = TrialRunner(evalset, config, path, resources, progress=False, remeasure=False)
        try:
            for tid, plan in todo:
                outcomes, index = runner.run(plan, queries, tid)
                trial = score_trial(tid, plan, outcomes, index, evalset, config, names, keep, runner.cache)
                ranked = [(o.query_id, o.ranking) for o in outcomes] if rankings else None
                done.append(TrialDone(trial, [o.ms for o in outcomes], ranked))
        finally:
            runner.close()
    return done


def grid_tasks(plans: Sequence[tuple[str, PlanConfig]], cpus: int) -> list[list[tuple[str, PlanConfig]]]:
    """The grid cut into tasks: each (embedder, chunker) group whole, or in contiguous slices when there are
    fewer groups than CPUs; concatenated, the tasks are the plans in their order."""
    groups: dict[str, list[tuple[str, PlanConfig]]] = {}
    for tid, plan in plans:
        groups.setdefault(f"{plan.embedder.fingerprint()}:{plan.chunker.fingerprint()}", []).append((tid, plan))
    pieces = max(1, math.ceil(cpus / max(1, len(groups))))
    tasks = []
    for group in groups.values():
        size = math.ceil(len(group) / min(pieces, len(group)))
        tasks += [group[i:i + size] for i in range(0, len(group), size)]
    assert [p for task in tasks for p in task] == list(plans), "plans of one group must be contiguous"
    return tasks


def run_on_ray(plans: list[tuple[str, PlanConfig]], runner: Any, config: SweepConfig, names: list[str],
               keep: set[str], gates: Sequence[Any], record: Record, *, max_trials: int, rankings: bool,
               progress: bool) -> None:
    """Every trial of the sweep (the grid, or an Optuna sample) as Ray tasks; `record` receives each one in
    the order the local executor would have produced it."""
    from ragopt.progress import progress_bar

    from ragopt.eval.executor import code_fingerprint
    from ragopt.eval.search import optuna_search

    require_ray()
    for _, plan in plans:  # build (or reuse) every index here, once, before any task opens it
        runner.index(plan)
    workspace = str(Path(runner.workspace).resolve())
    with ray_session(config.ray_address) as ray:
        from ray.exceptions import RayTaskError

        task = ray.remote(num_cpus=1)(run_trials)
        shared = [ray.put(runner.evalset), ray.put(config), workspace, names, keep]
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        code = code_fingerprint()

        def run(batches: list[list[tuple[str, PlanConfig]]], bar: Any = None) -> list[Trial]:
            refs = [task.remote(*shared, batch, code, rankings) for batch in batches]
            sizes = {ref: len(batch) for ref, batch in zip(refs, batches)}
            pending = list(refs)
            try:
                while pending:  # progress as tasks finish (a failure stops the sweep at once); results in order below
                    ready, pending = ray.wait(pending, num_returns=1)
                    ray.get(ready)
                    if bar is not None:
                        bar.update(sum(sizes[r] for r in ready))
                finished = ray.get(refs)
            except RayTaskError as exc:
                if isinstance(exc.cause, InputError):  # one line, as the local executor reports it
                    raise exc.cause from None
                raise
            trials = []
            for batch, dones in zip(batches, finished):
                for (tid, plan), done in zip(batch, dones):
                    trials.append(record(tid, plan, done.trial, done.latencies, done.rankings))
            return trials

        if config.search == "grid":
            with progress_bar(total=len(plans), desc=f"trials (ray, {cpus} CPUs)", disable=not progress) as bar:
                run(grid_tasks(plans, cpus), bar)
            return

        def evaluate_batch(todo: list[tuple[str, PlanConfig]]) -> list[Trial]:  # one task per trial
            return run([[item] for item in todo]) if todo else []

        optuna_search(plans, lambda tid, plan: evaluate_batch([(tid, plan)])[0], gates, max_trials=max_trials,
                      seed=config.seed, progress=progress, evaluate_batch=evaluate_batch, batch=cpus)


def run_outcomes(evalset: EvalSet, config: SweepConfig, workspace: str, tid: str, plan: PlanConfig,
                 query_ids: list[str], code: str) -> list[Any]:
    """A Ray task's body in a race: one trial's plan over some questions, its outcomes (traces kept, to count
    the generations made) in the order of `query_ids`."""
    from ragopt.eval.executor import code_fingerprint
    from ragopt.eval.trials import TrialRunner
    from ragopt.resources import Resources

    if code_fingerprint() != code:
        raise InputError(f"a Ray worker runs other ragopt code ({code_fingerprint()}) than this driver ({code}): "
                         "install the same ragopt on every node", field="executor")
    by_id = {q.query.id: q.query for q in evalset.queries}
    with Resources() as resources:
        runner = TrialRunner(evalset, config, Path(workspace), resources, progress=False, remeasure=False)
        try:
            return runner.run(plan, [by_id[qid] for qid in query_ids], tid)[0]
        finally:
            runner.close()


@contextmanager
def race_batches(runner: Any, config: SweepConfig, plans: Sequence[tuple[str, PlanConfig]]) -> Iterator[Callable[..., Any]]:
    """A race's answering runs as Ray tasks, each round's questions split over the cluster's CPUs, over the driver's
    workspace (indexes built here first); yields the race's `run_batch`."""
    from ragopt.eval.executor import code_fingerprint

    require_ray()
    for _, plan in plans:
        runner.index(plan)
    workspace = str(Path(runner.workspace).resolve())
    with ray_session(config.ray_address) as ray:
        from ray.exceptions import RayTaskError

        task = ray.remote(num_cpus=1)(run_outcomes)
        shared = [ray.put(runner.evalset), ray.put(config), workspace]
        code = code_fingerprint()

        # the race answers one trial at a time: a round's questions are split over the cluster's CPUs
        width = max(1, int(ray.cluster_resources().get("CPU", 1)))

        def run_batch(items: list[tuple[Any, list[Any]]]) -> list[list[Any]]:
            tasks = [(k, s, [q.id for q in questions[i::width]]) for k, (s, questions) in enumerate(items)
                     for i in range(min(width, len(questions)))]
            try:
                parts = ray.get([task.remote(*shared, s.tid, s.plan, ids, code) for _, s, ids in tasks])
            except RayTaskError as exc:
                if isinstance(exc.cause, InputError):
                    raise exc.cause from None
                raise
            found: list[dict[str, Any]] = [{} for _ in items]
            for (k, _, _), outcomes in zip(tasks, parts):
                found[k].update((o.query_id, o) for o in outcomes)
            return [[found[k][q.id] for q in questions] for k, (_, questions) in enumerate(items)]

        yield run_batch
