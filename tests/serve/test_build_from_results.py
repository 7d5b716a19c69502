"""What is served is what was measured. A sweep on the tiny corpus with a tuned embedder ("trained:test"), a
cross-encoder rerank (also trained), compression, the prompt stage, the extractive generator and citation
attribution: `ragopt serve --from results.json` answers every question with the hits (ids and order), the
fitted prompt, the answer and citations, and the stage names the sweep recorded for that trial (read back
from the sweep's own outcome cache, not recomputed). The same holds through `ragopt export` -> `--plan` and
the Python loader; a results file whose corpus changed is refused with exit 2 and one line."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures.serving import KEYS, running_service
from fixtures.tiny_corpus import TINY_DOCS, write_beir

from ragopt.cli import main
from ragopt.data import load_evalset
from ragopt.eval.sweep import SweepConfig, run_sweep
from ragopt.eval.trials import TrialRunner
from ragopt.plan import export_toml, load_plan, open_saved
from ragopt.resources import Resources
from ragopt.serve.build import ServeOptions, build_service
from ragopt.serve.service import ServeSettings

STAFF = {"Authorization": "Bearer key-acme-staff"}


def _config(dataset: Path) -> SweepConfig:
    return SweepConfig.model_validate({
        "dataset": str(dataset), "split": "test", "chunk_sizes": ["whole"], "retrievers": ["hybrid"], "top_k": [3],
        "embedders": ["trained:test"], "answer_metrics": [],
        "stages": {"rerank": {"model": "trained:test", "depth": 6, "max_length": 64},
                   "compress": {"budget": 0.6}, "prompt": {}, "generate": {"generator": "extractive"},
                   "cite": {"enabled": True}},
    })


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One sweep, its results.json, and the outcomes it recorded for the selected trial."""
    root = tmp_path_factory.mktemp("identity")
    dataset, ws = write_beir(root / "tiny"), root / "ws"
    evalset = load_evalset(dataset)
    outcome = run_sweep(evalset, _config(dataset), ws, progress=False)
    results = outcome.results.save(root / "results.json")
    selected = outcome.results.selected
    with Resources() as resources:
        runner = TrialRunner(evalset, outcome.config, ws, resources, progress=False, remeasure=False)
        recorded, _ = runner.run(outcome.plans[selected], [q.query for q in evalset.queries], "again")
        runner.close()
    keys = root / "keys.json"
    keys.write_text(json.dumps(KEYS), encoding="utf-8")
    return {"root": root, "dataset": dataset, "ws": ws, "results": results, "selected": selected, "recorded": recorded,
            "evalset": evalset, "keys": keys, "plan": outcome.plans[selected]}


def _ask_all(opts: ServeOptions, swept: dict[str, Any]) -> list[dict[str, Any]]:
    with running_service(opts, swept["ws"], swept["keys"]) as (url, _):
        return [httpx.post(f"{url}/v1/ask", json={"question": q.query.text, "stream": False}, headers=STAFF, timeout=120).json()
                for q in swept["evalset"].queries]


def _assert_identical(answers: list[dict[str, Any]], swept: dict[str, Any]) -> None:
    recorded = swept["recorded"]
    assert all(o.from_earlier_run for o in recorded)  # the sweep's own outcomes, read back, not recomputed
    assert any(o.answer and o.answer["citations"] for o in recorded)  # attribution had something to cite
    for served, sweep in zip(answers, recorded):
        trace = served["trace"]
        assert trace["hits"] == [r[0] for r in sweep.ranking]
        assert trace["prompt"]["fingerprint"] == sweep.prompt_fingerprint and sweep.prompt_fingerprint is not None
        assert trace["prompt"]["tokens"] == sweep.prompt_tokens
        assert served["answer"] == sweep.answer["text"]
        assert served["citations"] == sweep.answer["citations"]
        assert [s["name"] for s in trace["spans"] if not s["skipped"]] == list(sweep.stage_ms)


def test_the_trial_records_its_plan_with_the_tuned_models(swept: dict[str, Any]) -> None:
    trial = next(t for t in json.loads(swept["results"].read_text())["trials"] if t["id"] == swept["selected"])
    assert trial["plan"] == swept["plan"].model_dump(mode="json")
    tuned = Path(trial["plan"]["embedder"]["model"])
    assert tuned.is_dir() and (tuned / "ragopt-training.json").is_file()  # the trained folder, not "trained:test"
    assert set(trial["models"]) == {"embedder", "rerank"}
    assert list(swept["recorded"][0].stage_ms) == ["embed", "vector", "bm25", "fuse", "rerank", "keep_top", "compress",
                                                    "prompt", "extractive", "attribute"]


def test_serve_from_results_answers_as_the_sweep_measured(swept: dict[str, Any]) -> None:
    opts = ServeOptions(settings=ServeSettings(), saved=load_plan(swept["results"]), cache=False)
    _assert_identical(_ask_all(opts, swept), swept)


def test_an_exported_plan_and_the_python_loader_rebuild_the_same(swept: dict[str, Any]) -> None:
    toml = export_toml(load_plan(swept["results"]), swept["root"] / "plan.toml")
    saved = load_plan(toml)
    assert saved.plan == swept["plan"] and saved.provenance == load_plan(swept["results"]).provenance
    _assert_identical(_ask_all(ServeOptions(settings=ServeSettings(), saved=saved, cache=False), swept), swept)
    with Resources() as resources:
        pipeline, _ = open_saved(saved, swept["ws"], resources=resources)
        first = pipeline.run(swept["evalset"].queries[0].query)
    assert [h.chunk.id for h in first.hits] == [r[0] for r in swept["recorded"][0].ranking]


def test_a_changed_corpus_or_version_is_refused_in_one_line(swept: dict[str, Any], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    results = json.loads(swept["results"].read_text())
    changed = write_beir(tmp_path / "tiny", docs=[{**TINY_DOCS[0], "text": "Edited."}, *TINY_DOCS[1:]])
    results["dataset"]["path"] = str(changed)
    moved = tmp_path / "results.json"
    moved.write_text(json.dumps(results), encoding="utf-8")
    argv = ["--workspace", str(swept["ws"]), "serve", "--from", str(moved), "--api-keys", str(swept["keys"])]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corpus" in err[0] and "changed" in err[0] and str(moved) in err[0]
    results["dataset"]["path"], results["versions"]["ragopt"] = str(swept["dataset"]), "0.0.1"
    moved.write_text(json.dumps(results), encoding="utf-8")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ragopt 0.0.1" in err[0]
    assert main(["--workspace", str(swept["ws"]), "export", "--from", str(moved), "--trial", "nope", "--out", str(tmp_path / "p.toml")]) == 2
    assert "no trial 'nope'" in capsys.readouterr().err


def test_a_changed_model_is_refused_before_anything_is_built(swept: dict[str, Any], tmp_path: Path) -> None:
    saved = load_plan(swept["results"])
    prov = saved.provenance
    edited = prov.model_copy(update={"models": {**prov.models, "rerank": prov.models["rerank"].model_copy(update={"fingerprint": "0" * 16})}})
    from ragopt.errors import InputError

    with ExitStack() as stack, pytest.raises(InputError, match="rerank model .* is not the one measured"):
        build_service(ServeOptions(settings=ServeSettings(), saved=saved.model_copy(update={"provenance": edited})),
                      tmp_path / "ws", stack)
    assert not (tmp_path / "ws" / "indexes").exists()


def test_ask_from_results_prints_the_recorded_answer(swept: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    query, recorded = swept["evalset"].queries[0].query, swept["recorded"][0]
    argv = ["--workspace", str(swept["ws"]), "ask", "--from", str(swept["results"]), "--no-stream", query.text]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == recorded.answer["text"]
    assert [line.split()[0] for line in out.split("trace:", 1)[1].splitlines() if line.strip()][:10] == list(recorded.stage_ms)
