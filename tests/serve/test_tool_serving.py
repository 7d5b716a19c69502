"""`ragopt serve` with the tool stage: the tool is called after the (cached) hits and before the request takes a
generation slot, so a slow tool never holds one; an answer holding live data is never cached (a second request
sees a changed status); with the service stopped the answer comes from the documents, marked incomplete."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from fixtures.serving import running_service

from ragopt.backends.collection_status import SCHEMA, CollectionStatusService
from ragopt.config import ChunkerConfig, RetrievalConfig
from ragopt.plan import PlanConfig
from ragopt.serve.build import ServeOptions
from ragopt.serve.service import ServeSettings
from ragopt.shipped import shipped_collection_runs, shipped_dataset

NORTH = {"Authorization": "Bearer key-north"}
QUESTION = "What data type is LAB_GLU_FAST in HelixLab, and why did its last collection fail?"


def _options(url: str) -> ServeOptions:
    plan = PlanConfig(chunker=ChunkerConfig(mode="tokens", size=64, overlap=16), retrieval=RetrievalConfig(retriever="bm25", top_k=5),
                      stages={"generate": {"generator": "extractive"},
                              "tool": {"call": "rule", "url": url, "result_schema": json.dumps(SCHEMA), "timeout_s": 1.0}})
    return ServeOptions(settings=ServeSettings(slots=1), plan=plan, dataset=str(shipped_dataset() / "tool_questions.jsonl"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    path.write_text(json.dumps({"key-north": {"tenant": "north-hospital", "scopes": ["clinical", "ops"]}}), encoding="utf-8")
    return path


def _ask(url: str, question: str = QUESTION) -> dict:
    response = httpx.post(f"{url}/v1/ask", json={"question": question, "stream": False}, headers=NORTH, timeout=60)
    response.raise_for_status()
    return response.json()


def test_the_tool_runs_outside_the_generation_slot_and_its_answers_are_never_cached(tmp_path: Path, keys: Path) -> None:
    status = CollectionStatusService(shipped_collection_runs())
    try:
        with running_service(_options(status.status_url), tmp_path / "ws", keys) as (url, service):
            assert [s.stage.name for s in service.live.steps] == ["tool"]
            assert all(s.stage.name != "tool" for p in service.pipelines.values() for s in p.steps)
            first = _ask(url)
            spans = [s["name"] for s in first["trace"]["spans"]]
            assert spans.index("tool") < spans.index("extractive") and spans[-1] == "tool_answer"
            assert "Live data (collection_status, read" in first["answer"] and first["trace"]["cache"]["answer"] is None
            job = next(c for c in first["citations"] if c["doc_id"] == "live:collection_status")
            assert job["source"].startswith("live data, read")
            newer = {"run_id": "new", "job": "lab_chem_ingest", "tenant": "north-hospital", "status": "succeeded",
                     "started_at": "2026-12-09T01:00:00+00:00", "rows_loaded": 777, "operator": "x"}
            httpx.post(status.url + "/runs", json=newer, timeout=5).raise_for_status()
            second = _ask(url, QUESTION.replace("why did its last collection fail", "how many rows did its last load bring in"))
            assert "rows_loaded: 777" in second["answer"]
            status.close()
            down = _ask(url)
            assert "the live part is missing" in down["answer"].lower()
            assert down["trace"]["finish_reason"] == "tool_connection"
            assert "tool: tool_connection -> documents only" in down["trace"]["degraded"]
    finally:
        status.close()
