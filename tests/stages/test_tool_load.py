"""The tool stage under load, against the real collection-status service (SQLite behind FastAPI, a child process)
with an injected delay: many requests at once through one pipeline all get the live part (the wait for a worker is
not the tool's time), the trials of a timeout sweep each have their own breaker, and a request with less time left
than `timeout_s` gives the tool only that time."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fixtures.tool_service import DOC, QUESTION, RUN, pipeline
from ragopt.backends.collection_status import SCHEMA, CollectionStatusService
from ragopt.config import ChunkerConfig, RetrievalConfig
from ragopt.pipeline import RequestState
from ragopt.plan import PlanConfig, open_plan
from ragopt.resources import Resources
from ragopt.types import Document, Hit, Query


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "runs.jsonl"
    path.write_text(json.dumps(RUN) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def delayed(runs: Path):
    """The service holding each answer 0.3 s: healthy, a little slow."""
    svc = CollectionStatusService(runs, delay_s=0.3)
    yield svc
    svc.close()


def ask(p, deadline_s: float | None = None):  # type: ignore[no-untyped-def]
    hits = [Hit(chunk=DOC, score=1.0, rank=1, retriever="bm25")]
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    return p.run_state(RequestState(query=Query(text=QUESTION, tenant="north"), hits=hits, deadline=deadline))


def test_many_requests_at_once_through_one_pipeline_all_get_the_live_part(delayed: CollectionStatusService):
    # 32 requests at once, each call 0.3 s of the service's time: with 4 threads per tool (as before) the last ones
    # waited 2 s for a thread, which counted against a 1 s timeout and opened the breaker for everyone
    p, _ = pipeline(delayed.status_url, timeout_s=1.0)
    breaker = p.steps[0].stage.breaker
    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(lambda _: ask(p), range(32)))
    assert [r.trace.degraded for r in results] == [[]] * 32
    assert all(not r.answer.incomplete and "source table LAB_RESULT_CHEM locked" in r.answer.text for r in results)
    assert breaker.state == "closed" and breaker.consecutive_failures == 0 and breaker.transitions == []


def test_the_request_deadline_cuts_the_call_and_says_nothing_of_the_tool(delayed: CollectionStatusService):
    # timeout_s 30 s, the service answers after 0.3 s, the request has 0.1 s left: the call gets 0.1 s, not 30
    p, _ = pipeline(delayed.status_url, timeout_s=30.0)
    breaker = p.steps[0].stage.breaker
    for _ in range(4):  # more than the breaker's 3 failures: none of these counts as one
        result = ask(p, deadline_s=0.1)
        assert "tool: tool_deadline -> documents only" in result.trace.degraded
        assert result.hits[-1].chunk.metadata["missing"] == "tool_deadline"
    assert breaker.state == "closed" and breaker.consecutive_failures == 0
    assert "tool: tool_deadline -> documents only" not in ask(p, deadline_s=20.0).trace.degraded


def test_the_trials_of_a_timeout_sweep_do_not_share_a_breaker(runs: Path, tmp_path: Path):
    """Two trials built as a sweep builds them (one plan each, the sweep's shared resources): the 0.5 s trial's
    timeouts against a service answering after 1 s open its breaker, and the 3 s trial still calls the tool."""
    svc = CollectionStatusService(runs, delay_s=1.0)
    documents = [Document(id=DOC.doc_id, text=DOC.text, title=DOC.title, tenant="north")]

    def trial(timeout_s: float, resources: Resources):  # type: ignore[no-untyped-def]
        tool = {"call": "always", "url": svc.status_url, "result_schema": json.dumps(SCHEMA), "timeout_s": timeout_s}
        plan = PlanConfig(chunker=ChunkerConfig(mode="tokens", size=64, overlap=16),
                          retrieval=RetrievalConfig(retriever="bm25", top_k=1),
                          stages={"generate": {"generator": "extractive"}, "tool": tool})
        return open_plan(plan, documents, tmp_path / "ws", resources=resources, progress=False)[0]

    try:
        with Resources() as resources:
            short, long = trial(0.5, resources), trial(3.0, resources)
            causes = [short.run(Query(text=QUESTION, tenant="north")).state.hits[-1].chunk.metadata["missing"] for _ in range(4)]
            assert causes == ["tool_timeout"] * 3 + ["tool_breaker_open"]
            answer = long.run(Query(text=QUESTION, tenant="north")).answer
            assert not answer.incomplete and "source table LAB_RESULT_CHEM locked" in answer.text
    finally:
        svc.close()
