"""Adding a stage is one module. This file alone declares the kind `stamp` (its config, its stage and its SPEC,
a file it loads as its "model") and makes it known the two ways a stage can be: `register_stage` in this process,
and an entry point (group "ragopt.stages") of a tiny installed distribution for the subprocesses. With no edit
anywhere in ragopt, the sweep varies its knob, results.json records its params and its model file, `ragopt
stages` lists it, `ragopt serve --from` rebuilds the trial with it, and provenance refuses a changed model file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from fixtures.cli import one_line_error, ragopt
from fixtures.serving import KEYS, serve_process
from fixtures.tiny_corpus import write_beir
from ragopt.config import StrictModel, knob
from ragopt.pipeline import RequestState
from ragopt.stages.spec import BuildContext, ModelFile, StageSpec

TESTS = Path(__file__).resolve().parents[1]
STAFF = {"Authorization": "Bearer key-acme-staff"}


class StampConfig(StrictModel):
    drop_first: bool = knob(False, sweep=[False, True], description="drop the best-ranked hit")
    model: str | None = knob(None, description="a file the stage reads (stands for a model's weights)")


class Stamp:
    """Drops the best hit when its knob says so, after reading its "model" file."""

    reads = ("hits",)
    writes = ("hits",)

    def __init__(self, config: StampConfig) -> None:
        self.name, self.config = "stamp", config
        self.weights = Path(config.model).read_bytes() if config.model else b""

    def run(self, state: RequestState) -> RequestState:
        if self.config.drop_first:
            state.hits = [h.model_copy(update={"rank": h.rank - 1}) for h in state.hits[1:]]
        return state


def _models(config: StampConfig) -> dict[str, ModelFile]:
    if config.model is None:
        return {}
    return {"stamp": ModelFile(config.model, hashlib.sha256(Path(config.model).read_bytes()).hexdigest()[:16])}


def _build(config: StampConfig, ctx: BuildContext) -> Stamp:
    return Stamp(config)


SPEC = StageSpec("stamp", StampConfig, _build, slot="rerank", models=_models)


def _installed(root: Path) -> tuple[str, ...]:
    """A distribution declaring this file's SPEC as an entry point: PYTHONPATH folders for a subprocess."""
    dist = root / "ragopt_stamp_stage-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ragopt-stamp-stage\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(f"[ragopt.stages]\nstamp = {Path(__file__).stem}:SPEC\n", encoding="utf-8")
    return str(root), str(Path(__file__).parent), str(TESTS)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from ragopt.data import load_evalset
    from ragopt.eval.sweep import SweepConfig, run_sweep
    from ragopt.plan import register_stage, unregister_stage

    root = tmp_path_factory.mktemp("stamp")
    dataset, ws, model = write_beir(root / "tiny"), root / "ws", root / "stamp.bin"
    model.write_bytes(b"weights v1")
    keys = root / "keys.json"
    keys.write_text(json.dumps(KEYS), encoding="utf-8")
    register_stage(SPEC)
    try:
        config = SweepConfig.model_validate({
            "dataset": str(dataset), "chunk_sizes": ["whole"], "retrievers": ["bm25"], "top_k": [3], "answer_metrics": [],
            "stages": {"stamp": {"drop_first": [False, True], "model": str(model)}, "generate": {"generator": "extractive"}}})
        outcome = run_sweep(load_evalset(dataset), config, ws, progress=False)
        results = outcome.results.save(root / "results.json")
        yield {"root": root, "dataset": dataset, "ws": ws, "model": model, "keys": keys, "results": results,
               "pythonpath": _installed(root / "site"), "plans": outcome.plans}
    finally:
        unregister_stage("stamp")


def _dropping_trial(results: Path) -> dict[str, Any]:
    return next(t for t in json.loads(results.read_text())["trials"] if t["params"]["stamp.drop_first"] is True)


def test_the_sweep_varies_its_knob_and_results_record_its_params_and_model(swept: dict[str, Any]) -> None:
    trials = json.loads(swept["results"].read_text())["trials"]
    assert sorted(t["params"]["stamp.drop_first"] for t in trials) == [False, True]
    fingerprint = hashlib.sha256(b"weights v1").hexdigest()[:16]
    assert all(t["models"]["stamp"] == {"name": str(swept["model"]), "fingerprint": fingerprint} for t in trials)
    assert all(t["plan"]["stages"]["stamp"]["model"] == str(swept["model"]) for t in trials)


def test_ragopt_stages_lists_it_from_its_entry_point(swept: dict[str, Any]) -> None:
    done = ragopt("stages", workspace=swept["root"] / "ws-stages", env={"PYTHONPATH": ":".join([*swept["pythonpath"], str(TESTS.parent)])})
    assert done.returncode == 0, done.stderr
    assert "stamp  (slot rerank)" in done.stdout
    assert "knob stamp.drop_first = False  sweep [False, True]  drop the best-ranked hit" in done.stdout


def _hits(results: Path, trial: str, ws: Path, questions: list[str]) -> list[list[str]]:
    """The trial's hits for each question, rebuilt in this process (the kind registered here)."""
    from ragopt.plan import load_plan, open_saved, register_stage, unregister_stage
    from ragopt.resources import Resources
    from ragopt.types import Query

    register_stage(SPEC)
    try:
        with Resources() as resources:
            pipeline, _ = open_saved(load_plan(results, trial), ws, resources=resources)
            return [[h.chunk.id for h in pipeline.run(Query(text=q)).hits] for q in questions]
    finally:
        unregister_stage("stamp")


def test_serve_from_rebuilds_the_trial_with_the_stage(swept: dict[str, Any]) -> None:
    trials = json.loads(swept["results"].read_text())["trials"]
    dropping = _dropping_trial(swept["results"])["id"]
    keeping = next(t["id"] for t in trials if t["id"] != dropping)
    questions = ["How do plants make glucose from sunlight?", "What makes bread dough rise?"]
    expected = _hits(swept["results"], dropping, swept["ws"], questions)
    kept = _hits(swept["results"], keeping, swept["ws"], questions)
    assert expected == [hits[1:] for hits in kept] and all(len(hits) >= 2 for hits in kept)  # the stage dropped the best
    args = ["--from", str(swept["results"]), "--trial", dropping, "--api-keys", str(swept["keys"])]
    with serve_process(args, swept["ws"], swept["pythonpath"]) as url:
        served = [httpx.post(f"{url}/v1/ask", json={"question": q, "stream": False}, headers=STAFF, timeout=120).json()
                  for q in questions]
    for out, hits in zip(served, expected):
        assert "stamp" in [s["name"] for s in out["trace"]["spans"] if not s["skipped"]]
        assert out["trace"]["hits"] == hits


def test_provenance_refuses_a_changed_model_file_of_the_stage(swept: dict[str, Any]) -> None:
    trial = _dropping_trial(swept["results"])
    env = {"PYTHONPATH": ":".join([*swept["pythonpath"], str(TESTS.parent)])}
    argv = ["serve", "--from", str(swept["results"]), "--trial", trial["id"], "--api-keys", str(swept["keys"])]
    swept["model"].write_bytes(b"weights v2")
    try:
        line = one_line_error(ragopt(*argv, workspace=swept["ws"], env=env), "serve")
    finally:
        swept["model"].write_bytes(b"weights v1")
    assert "the stamp model" in line and "is not the one measured" in line and "[models.stamp]" in line, line
