"""`ragopt sweep --mlflow URI` against a real MLflow server: one parent run, one child per trial with the
results.json figures, the selected trial tagged; an unchanged re-run logs nothing twice; `--from runs:/ID` rebuilds
the trial's plan; an unreachable server is one line naming --mlflow, exit 2, before any work."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from ragopt.cli import main  # noqa: E402
from ragopt.observe.mlflow_runs import metric_key  # noqa: E402

SWEEP = ["sweep", "--retrievers", "bm25", "--chunk-sizes", "whole", "--top-k", "1,3,5", "--gate", "recall@5>=0.5",
         "--no-progress"]


def test_metric_keys_are_legal_mlflow_names() -> None:
    assert metric_key("recall@10") == "recall_at_10"
    assert metric_key("citation_precision@doc.mean") == "citation_precision_at_doc.mean"
    assert metric_key("a(b)") == "a_b_"


def test_a_sweep_logs_a_parent_and_a_child_per_trial_once(tiny_beir: Path, tmp_path: Path, mlflow_url: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    experiment = f"sweep-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    args = ["--workspace", str(tmp_path / "ws"), *SWEEP, "--dataset", str(tiny_beir), "--out", str(tmp_path / "out"),
            "--mlflow", mlflow_url]
    assert main(args) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    client = MlflowClient(mlflow_url)
    exp_id = client.get_experiment_by_name(experiment).experiment_id
    runs = client.search_runs([exp_id])
    (parent,) = [r for r in runs if r.data.tags.get("ragopt.role") == "sweep"]
    children = {r.data.tags["ragopt.trial"]: r for r in runs if r.data.tags.get("ragopt.role") == "trial"}
    assert sorted(children) == sorted(t["id"] for t in results["trials"]) and len(results["trials"]) == 3
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in children.values())
    assert [i for i, r in children.items() if r.data.tags["ragopt.selected"] == "true"] == [results["selected"]]
    assert parent.data.tags["ragopt.selected_trial"] == results["selected"]
    for trial in results["trials"]:
        logged = children[trial["id"]].data
        figures = {**trial["metrics"], **trial["costs"]}
        expected = {metric_key(k): v for k, v in figures.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert logged.metrics == expected  # every figure, equal to results.json's
        assert logged.params["top_k"] == str(trial["params"]["top_k"]) and logged.params["retriever"] == "bm25"
        assert logged.tags["ragopt.gate.0"].startswith("pass" if trial["id"] == results["selected"] else ("pass", "FAIL"))
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"results.json", "summary.md", "report.html"} <= artifacts

    assert main(args) == 0  # unchanged: the trials come from the workspace, and no run is logged twice
    again = client.search_runs([exp_id])
    assert len(again) == len(runs)
    rerun = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    latest = {r.data.tags["ragopt.trial"]: r.data.metrics for r in again if r.data.tags.get("ragopt.role") == "trial"}
    for trial in rerun["trials"]:  # a figure measured again (a latency) is the run's latest value
        figures = {**trial["metrics"], **trial["costs"]}
        assert latest[trial["id"]] == {metric_key(k): v for k, v in figures.items()
                                       if isinstance(v, (int, float)) and not isinstance(v, bool)}

    child = children[results["selected"]].info.run_id
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_url)
    from ragopt.cli import build_parser
    from ragopt.cli._common import saved_plan

    served = saved_plan(build_parser().parse_args(["--workspace", str(tmp_path / "ws"), "serve", "--api-keys", "k",
                                                   "--from", f"runs:/{child}"]))
    selected = next(t for t in results["trials"] if t["id"] == results["selected"])
    assert served.provenance.trial == results["selected"] and served.plan.model_dump(mode="json") == selected["plan"]


def test_an_unreachable_server_is_one_line_and_exit_2_before_any_work(tiny_beir: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from ragopt.backends.child_server import free_port

    out = tmp_path / "out"
    assert main(["--workspace", str(tmp_path / "ws"), *SWEEP, "--dataset", str(tiny_beir), "--out", str(out),
                 "--mlflow", f"http://127.0.0.1:{free_port()}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[--mlflow]" in err[0] and "does not answer" in err[0]
    assert not out.exists()


def test_a_raced_sweep_tags_each_dropped_trial_and_serves_its_pick(tiny_beir: Path, tmp_path: Path, mlflow_url: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    experiment = f"race-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    args = ["--workspace", str(tmp_path / "ws"), *SWEEP, "--set", "generate.generator=extractive", "--race",
            "--dataset", str(tiny_beir), "--out", str(tmp_path / "out"), "--mlflow", mlflow_url]
    assert main(args) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    dropped = {t["id"]: t["race"] for t in results["trials"] if t["race"]["status"] == "dropped"}
    assert dropped and results["selected"] not in dropped
    client = MlflowClient(mlflow_url)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    tags = {r.data.tags["ragopt.trial"]: r.data.tags for r in runs if r.data.tags.get("ragopt.role") == "trial"}
    for tid, race in dropped.items():
        assert tags[tid]["ragopt.race"] == "dropped" and tags[tid]["ragopt.passed"] == "false"
        assert tags[tid]["ragopt.race.reason"] == race["reason"] and tags[tid]["ragopt.race.round"] == str(race["round"])
    assert tags[results["selected"]]["ragopt.race"] == "measured"
    from ragopt.cli import build_parser
    from ragopt.cli._common import saved_plan

    served = saved_plan(build_parser().parse_args(["--workspace", str(tmp_path / "ws"), "serve", "--api-keys", "k",
                                                   "--from", str(tmp_path / "out" / "results.json")]))
    selected = next(t for t in results["trials"] if t["id"] == results["selected"])
    assert served.provenance.trial == results["selected"] and served.plan.model_dump(mode="json") == selected["plan"]
