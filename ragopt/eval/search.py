"""How trials are chosen: the whole grid, or an Optuna TPE sample of it (seeded, within a trial budget).

Both run trials through the same `evaluate(trial id, plan) -> Trial`, so a sampled trial reuses every
stage output a memo already holds. TPE minimizes one number per trial: the sum of its gates' relative
shortfalls (so a failing trial is worse the further it misses), plus its context tokens scaled below any
shortfall (so among passing trials the cheaper wins, as in the grid's selection).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ragopt.errors import InputError
from ragopt.eval.results import Trial, measured
from ragopt.plan import PlanConfig

Evaluate = Callable[[str, PlanConfig], Trial]
EvaluateBatch = Callable[[list[tuple[str, PlanConfig]]], list[Trial]]  # trials in the order given


def coordinates(plan: PlanConfig) -> dict[str, str]:
    """A plan as one categorical value per dimension (what the sampler chooses among)."""
    r = plan.retrieval
    retriever = r.retriever + (f"-{r.fusion.method}-{r.fusion.alpha:g}" if r.retriever == "hybrid" else "")
    coords = {"embedder": plan.embedder.model, "chunker": plan.chunker.label, "retriever": retriever, "top_k": str(r.top_k)}
    coords.update({k: repr(v) for k, v in plan.params().items()})
    return coords


def shortfall(trial: Trial, gates: Sequence[Any]) -> float:
    values = trial.values()
    total = 0.0
    for gate in gates:
        observed = measured(values.get(gate.metric))
        if observed is None:
            total += 1.0
            continue
        verdict = gate.evaluate(values)
        if not verdict.passed:
            total += abs(verdict.margin or 0.0) / max(abs(gate.threshold), 1e-9) + 1e-6
    return total


def objective(trial: Trial, gates: Sequence[Any]) -> float:
    tokens = measured(trial.costs.context_tokens)
    return shortfall(trial, gates) * 1e6 + (tokens if tokens is not None else 1e5)


def optuna_search(plans: list[tuple[str, PlanConfig]], evaluate: Evaluate, gates: Sequence[Any], *, max_trials: int,
                  seed: int, progress: bool, evaluate_batch: EvaluateBatch | None = None, batch: int = 1) -> None:
    """Sample up to `max_trials` distinct trials of the grid with TPE; each is evaluated once.

    With `evaluate_batch` (the Ray executor), up to `batch` distinct asked trials are evaluated together
    before they are told (TPE then lies constantly about the ones in flight); `batch=1` asks and tells in
    exactly the order of the sequential search."""
    try:
        import optuna
    except ImportError:
        raise InputError("optuna search needs optuna: pip install 'ragopt[search]'", field="search") from None
    by_coords = {tuple(sorted(coordinates(plan).items())): (tid, plan) for tid, plan in plans}
    dims: dict[str, list[str]] = {}
    for coords in by_coords:
        for name, value in coords:
            dims.setdefault(name, [])
            if value not in dims[name]:
                dims[name].append(value)
    if evaluate_batch is None:
        evaluate_batch = lambda todo: [evaluate(tid, plan) for tid, plan in todo]  # noqa: E731
    seen: dict[str, float] = {}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, **({"constant_liar": True} if batch > 1 else {}))
    study = optuna.create_study(direction="minimize", sampler=sampler)
    budget = min(max_trials, len(plans))
    attempts = 0
    from ragopt.progress import progress_bar

    bar = progress_bar(total=budget, desc="trials (optuna)", disable=not progress)
    while len(seen) < budget and attempts < 20 * budget:  # proposals of an already-run trial do not count
        asked: list[tuple[Any, str]] = []  # (optuna trial, trial id) awaiting a value
        todo: dict[str, PlanConfig] = {}  # distinct trials to evaluate in this batch
        while len(todo) < batch and len(seen) + len(todo) < budget and attempts < 20 * budget:
            attempts += 1
            ask = study.ask()
            choice = tuple(sorted((name, ask.suggest_categorical(name, values)) for name, values in dims.items()))
            found = by_coords.get(choice)
            if found is None:  # a combination the grid leaves out (e.g. an overlap as large as the chunk)
                study.tell(ask, state=optuna.trial.TrialState.PRUNED)
                continue
            tid, plan = found
            if tid in seen:
                study.tell(ask, seen[tid])
                continue
            todo[tid] = plan
            asked.append((ask, tid))
        for tid, trial in zip(todo, evaluate_batch(list(todo.items()))):
            seen[tid] = objective(trial, gates)
            bar.update(1)
        for ask, tid in asked:
            study.tell(ask, seen[tid])
    bar.close()
