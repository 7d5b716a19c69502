"""A sweep in MLflow: one parent run per sweep, one child run per trial, read from the SweepResults that
results.json is written from, so a figure in MLflow equals the one in results.json.

- child run: the trial's params and plan knobs as params; every metric, cost and bootstrap interval as metrics;
  `ragopt.selected` (true/false) and each gate verdict as tags.
- parent run: the objective, gates and dataset as params, the selected trial as a tag, results.json, results.csv,
  summary.md and report.html as artifacts.
- a re-run finds the parent by the sweep's fingerprint (dataset, search space, objective, gates) and each child by
  its trial id: no run is created twice; a figure that changed (a latency measured again) is logged as the run's
  latest value of that metric, and the tags are brought up to date.

MLflow names may not hold "@": `recall@10` is logged as `recall_at_10` (`metric_key`).
Imports the MLflow client (`pip install 'ragopt[observe]'`): only when a sweep is logged or a run is read.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragopt.config import fingerprint
from ragopt.errors import InputError
from ragopt.eval.results import SweepResults, Trial, measured
from ragopt.observe.settings import INSTALL, check_url, installed

DEFAULT_EXPERIMENT = "ragopt"
_BATCH = 100  # MLflow takes at most 100 params or tags per batch
_MAX_PARAM = 6000


@dataclass
class LoggedSweep:
    parent_run_id: str
    experiment_id: str
    logged: int  # child runs created now
    kept: int  # child runs found from an earlier run of the same sweep


def metric_key(name: str) -> str:
    """An MLflow-legal name: "@" reads "_at_", any other character MLflow refuses becomes "_"."""
    return re.sub(r"[^\w.\- /:]", "_", name.replace("@", "_at_"))


def tracking_uri(flag_value: str | None, field: str = "--mlflow") -> str:
    """The tracking server: --mlflow URI, else $MLFLOW_TRACKING_URI; it must be an http(s) URL that answers
    /health, and the MLflow client must be installed. Checked before any work: one InputError otherwise."""
    uri = flag_value or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        raise InputError("needs a tracking server URL: --mlflow URI or MLFLOW_TRACKING_URI", field=field)
    check_url(uri, field)
    if not installed("mlflow"):
        raise InputError(f"logging to MLflow needs the MLflow client: {INSTALL}", field=field)
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as response:
            response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise InputError(f"the MLflow server at {uri} does not answer: {getattr(exc, 'reason', exc)}", field=field) from None
    return uri


def sweep_key(results: SweepResults) -> str:
    """What makes two runs the same sweep: the data, the search space, the objective and the gates."""
    return fingerprint({"dataset": results.dataset.fingerprint, "space": results.search_space,
                        "objective": results.objective, "gates": results.gates})


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        elif value is not None:
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            out[metric_key(prefix + key)] = text[:_MAX_PARAM]
    return out


def trial_params(trial: Trial) -> dict[str, str]:
    """The trial's params and its plan's knobs (`plan.stages.rerank.depth`, ...) as MLflow params."""
    return {**_flat(trial.params.model_dump(mode="json")), **_flat(trial.plan or {}, "plan.")}


def trial_metrics(trial: Trial) -> dict[str, float]:
    """Every measured metric and cost, and each bootstrap interval as NAME.mean/.low/.high."""
    values = {**trial.metrics, **trial.costs.model_dump(mode="json")}
    out = {metric_key(k): float(v) for k, v in values.items() if measured(v) is not None}
    for name, interval in trial.intervals.items():
        out.update({metric_key(f"{name}.{part}"): getattr(interval, part) for part in ("mean", "low", "high")})
    return out


def trial_tags(results: SweepResults, trial: Trial) -> dict[str, str]:
    verdicts = results.verdicts.get(trial.id, [])
    tags = {"ragopt.selected": str(trial.id == results.selected).lower(),
            "ragopt.passed": str(not trial.dropped and all(v.passed for v in verdicts)).lower()}
    if trial.race is not None:  # a raced sweep: a dropped trial's answer figures cover only the questions it answered
        tags.update({"ragopt.race": trial.race.status, "ragopt.race.round": str(trial.race.round),
                     "ragopt.race.answered": f"{trial.race.answered} of {trial.race.questions}"})
        if trial.dropped:
            tags["ragopt.race.reason"] = trial.race.reason[:5000]
    tags.update({f"ragopt.gate.{i}": f"{'pass' if v.passed else 'FAIL'}: {v.message}" for i, v in enumerate(verdicts)})
    return tags


class _Runs:
    """The MLflow calls a sweep needs, on one client."""

    def __init__(self, uri: str):
        from mlflow import MlflowClient

        # MLflow prints a "View run ... at" line to stdout per finished run: stdout is ragopt's table, the run ids
        # go to stderr in ragopt's own line
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        self.client = MlflowClient(tracking_uri=uri)

    def experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        return found.experiment_id if found is not None else self.client.create_experiment(name)

    def search(self, experiment_id: str, where: str) -> list[Any]:
        runs, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], where, page_token=token)
            runs += list(page)
            token = page.token
            if not token:
                return runs

    def log(self, run_id: str, metrics: dict[str, float] | None = None, params: dict[str, str] | None = None,
            tags: dict[str, str] | None = None) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        items = ([("metrics", Metric(k, v, now, 0)) for k, v in sorted((metrics or {}).items())]
                 + [("params", Param(k, v)) for k, v in sorted((params or {}).items())]
                 + [("tags", RunTag(k, v)) for k, v in sorted((tags or {}).items())])
        for i in range(0, len(items), _BATCH):
            batch: dict[str, list[Any]] = {"metrics": [], "params": [], "tags": []}
            for kind, item in items[i:i + _BATCH]:
                batch[kind].append(item)
            self.client.log_batch(run_id, **batch)


def log_sweep(results: SweepResults, outputs: dict[str, Path], uri: str, experiment: str | None = None) -> LoggedSweep:
    """Log (or bring up to date) the sweep's parent run and a child run per trial; `outputs` are the files
    write_outputs wrote (attached to the parent)."""
    runs = _Runs(uri)
    experiment_id = runs.experiment(experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT)
    key = sweep_key(results)
    found = runs.search(experiment_id, f"tags.`ragopt.sweep` = '{key}' and tags.`ragopt.role` = 'sweep'")
    if found:
        parent = min(found, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id
    else:
        parent = runs.client.create_run(experiment_id, run_name=f"sweep {results.dataset.name}",
                                        tags={"ragopt.sweep": key, "ragopt.role": "sweep"}).info.run_id
        runs.log(parent, params={"objective": results.objective, "gates": json.dumps(results.gates),
                                 "dataset": results.dataset.name, "dataset.fingerprint": results.dataset.fingerprint,
                                 "n_queries": str(results.dataset.n_queries), "n_trials": str(len(results.trials))})
    children = {r.data.tags.get("ragopt.trial"): r for r in runs.search(experiment_id, f"tags.`mlflow.parentRunId` = '{parent}'")}
    logged = 0
    for trial in results.trials:
        found = children.get(trial.id)
        metrics = trial_metrics(trial)
        if found is None:
            run_id = runs.client.create_run(experiment_id, run_name=trial.id, tags={
                "mlflow.parentRunId": parent, "ragopt.trial": trial.id, "ragopt.sweep": key, "ragopt.role": "trial"}).info.run_id
            runs.log(run_id, metrics=metrics, params=trial_params(trial))
            runs.client.set_terminated(run_id, "FINISHED")
            logged += 1
        else:  # the run is kept; a figure this results.json measured again (a latency) becomes its latest value
            run_id = found.info.run_id
            runs.log(run_id, metrics={k: v for k, v in metrics.items() if found.data.metrics.get(k) != v})
        runs.log(run_id, tags=trial_tags(results, trial))  # a new gate or selection changes them
    held = {f"held_out.{k}": v for k, v in (results.held_out.metrics.items() if results.held_out else []) if measured(v) is not None}
    runs.log(parent, metrics={metric_key(k): float(v) for k, v in held.items()},
             tags={"ragopt.selected_trial": results.selected or "", "ragopt.created_at": results.created_at})
    for path in outputs.values():
        runs.client.log_artifact(parent, str(path))
    runs.client.set_terminated(parent, "FINISHED")
    return LoggedSweep(parent_run_id=parent, experiment_id=experiment_id, logged=logged, kept=len(results.trials) - logged)


def trial_of_run(run_id: str, uri: str, into: Path) -> tuple[Path, str]:
    """A trial's child run -> (its sweep's results.json, downloaded into `into`; the trial id), for `ragopt serve
    --from runs:/RUN_ID`. A run that is not a ragopt trial is an InputError naming --from."""
    from mlflow.exceptions import MlflowException

    runs = _Runs(uri)
    try:
        run = runs.client.get_run(run_id)
    except MlflowException as exc:
        raise InputError(f"no MLflow run {run_id!r} at {uri}: {str(exc).splitlines()[0]}", field="--from") from None
    trial, parent = run.data.tags.get("ragopt.trial"), run.data.tags.get("mlflow.parentRunId")
    if not trial or not parent:
        raise InputError(f"MLflow run {run_id} is not a ragopt sweep trial (no ragopt.trial tag)", field="--from")
    into.mkdir(parents=True, exist_ok=True)
    try:
        path = runs.client.download_artifacts(parent, "results.json", str(into))
    except MlflowException as exc:
        raise InputError(f"the sweep run {parent} has no results.json: {str(exc).splitlines()[0]}", field="--from") from None
    return Path(path), trial
