"""The tool stage against the real collection-status service (SQLite behind FastAPI, a child process): live data as a
cited passage, redacted and pruned, never remembered; with the service stopped or delayed past the timeout, the
answer comes from the documents alone within the timeout, marked incomplete, and the trace says why."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from fixtures.tool_service import DOC, QUESTION, RUN, SECRETS, pipeline
from ragopt.backends.breaker import CircuitBreaker
from ragopt.backends.collection_status import SCHEMA, CollectionStatusService
from ragopt.cache import Cache
from ragopt.config import validate
from ragopt.errors import InputError
from ragopt.memo import StageMemo
from ragopt.pipeline import Pipeline, RequestState
from ragopt.stages.generate_extractive import ExtractiveGenerator
from ragopt.stages.prompt import BuildPrompt, WordRenderer
from ragopt.stages.tool import CallTool, LiveAnswer, ToolConfig, _check
from ragopt.types import Hit, Query


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "runs.jsonl"
    older = {**RUN, "run_id": "r2", "started_at": "2026-12-02T02:15:00+00:00", "status": "succeeded", "rows_loaded": 812,
             "failure_reason": None, "notes": None}
    path.write_text("".join(json.dumps(r) + "\n" for r in (older, RUN)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def service(runs: Path):
    svc = CollectionStatusService(runs)
    yield svc
    svc.close()


def ask(p: Pipeline, question: str = QUESTION):
    hits = [Hit(chunk=DOC, score=1.0, rank=1, retriever="bm25")]
    t0 = time.perf_counter()
    result = p.run_state(RequestState(query=Query(text=question, tenant="north"), hits=hits))
    return result, time.perf_counter() - t0


def test_live_data_is_a_cited_passage_redacted_and_pruned(service: CollectionStatusService):
    result, _ = ask(pipeline(service.status_url)[0])
    answer, prompt = result.answer, result.state.prompt.text
    live = result.hits[-1].chunk
    assert live.metadata["live"] is True and live.metadata["read_at"] and live.doc_id == "live:collection_status"
    assert "source table LAB_RESULT_CHEM locked" in answer.text and "DECIMAL(5,1)" in answer.text
    assert any(c.chunk_id == live.id and c.source.startswith("live data, read") for c in answer.citations)
    assert not answer.incomplete and "Live data: collection_status" in prompt
    span = result.trace.span("tool")
    assert span.kind == "TOOL" and span.usage.attrs["pruned_tokens"] > 0
    seen = prompt + result.trace.model_dump_json() + answer.model_dump_json()
    assert not [v for v in SECRETS.values() if v in seen]
    assert "rows_loaded" not in live.text and "failure_reason" in live.text  # the question asks why, not how many


def test_without_redaction_and_pruning_the_fields_reach_the_prompt(service: CollectionStatusService):
    result, _ = ask(pipeline(service.status_url, redaction=False, prune=False)[0])
    assert SECRETS["operator"] in result.state.prompt.text and result.trace.span("tool").usage.attrs["pruned_tokens"] == 0


def test_a_question_the_rule_does_not_send_to_the_tool(service: CollectionStatusService):
    result, _ = ask(pipeline(service.status_url)[0], "What type is LAB_GLU_FAST?")
    assert result.trace.span("tool").usage.attrs == {} and all(not h.chunk.metadata.get("live") for h in result.hits)


def test_two_calls_seconds_apart_see_a_changed_status_even_with_a_memo(service: CollectionStatusService, tmp_path: Path):
    cache = Cache(tmp_path / "cache")
    p = pipeline(service.status_url, memo=StageMemo(cache))[0]
    first, _ = ask(p)
    newer = {**RUN, "run_id": "r4", "started_at": "2026-12-04T02:15:00+00:00", "status": "succeeded", "rows_loaded": 4321,
             "failure_reason": None, "notes": None}
    httpx.post(service.url + "/runs", json=newer, timeout=5).raise_for_status()
    second, _ = ask(p, QUESTION.replace("why did its last collection fail", "how many rows did its last load bring in"))
    third, _ = ask(p)
    assert "locked" in first.answer.text and "4321" in second.answer.text and "succeeded" in third.answer.text
    p.memo.flush()
    cache.close()
    stored = b"".join(f.read_bytes() for f in (tmp_path / "cache").rglob("*") if f.is_file())
    assert b"4321" not in stored and b"LAB_RESULT_CHEM locked" not in stored


@pytest.mark.parametrize("fault", ["stopped", "delayed"])
def test_a_stopped_or_slow_service_gives_a_documents_only_answer_within_the_timeout(runs: Path, fault: str):
    svc = CollectionStatusService(runs, delay_s=3.0 if fault == "delayed" else 0.0)
    url = svc.status_url
    if fault == "stopped":
        svc.close()
    p, config = pipeline(url, timeout_s=0.5)
    try:
        for i in range(5):  # the breaker opens after 3 failures; every request is still answered
            result, seconds = ask(p)
            assert seconds < config.timeout_s + 1.0
            assert result.answer.incomplete and "DECIMAL(5,1)" in result.answer.text
            assert "the live part is missing" in result.answer.text.lower()
            cause = "tool_breaker_open" if i >= 3 else ("tool_timeout" if fault == "delayed" else "tool_connection")
            assert f"tool: {cause} -> documents only" in result.trace.degraded
    finally:
        svc.close()


def _check_error(**settings: object) -> str:
    with pytest.raises(InputError) as exc:
        _check(validate(ToolConfig, {"url": "http://127.0.0.1:9/status", **settings}, "stages.tool"), None)
    return str(exc.value)


def test_bad_tool_settings_name_their_key():
    schema = json.dumps(SCHEMA)
    assert "[tool]" in _check_error(tool="nowhere") and "unknown tool" in _check_error(tool="nowhere")
    assert "[tool]" in _check_error(tool="no_such_module:thing", result_schema=schema)
    assert "[result_schema]" in _check_error(result_schema='{"type": "object", "properties": ')
    assert "[redact_fields]" in _check_error(result_schema=schema, redact_fields=["patient_id", "ssn"])
    assert "[timeout_s]" in _check_error(timeout_s=0)


@pytest.mark.parametrize("target", ["fixtures.live_tools:latest_run", "fixtures.live_tools:latest_run_tool"])
def test_a_typed_callable_or_a_langchain_tool_named_in_the_config(target: str):
    from ragopt.stages.tool import open_tool

    settings = {"tool": target, "call": "always", "field_words": {"failure_reason": ["why", "fail"]}}
    if target.endswith("_tool"):  # a BaseTool declares its input only: the schema says what it returns
        settings["result_schema"] = json.dumps({"type": "object", "properties": {f: {} for f in
                                                ("job", "tenant", "status", "failure_reason", "patient_id", "operator", "notes")}})
    config = ToolConfig(**settings)
    _check(config, None)
    client = open_tool(config)
    steps = [CallTool(config, client, CircuitBreaker(config.name, 3, 60), lambda t: len(t.split())), ExtractiveGenerator(),
             LiveAnswer()]
    result = Pipeline(steps, inputs=("query", "hits")).run_state(RequestState(
        query=Query(text=QUESTION, tenant="north"), hits=[Hit(chunk=DOC, score=1.0, rank=1, retriever="bm25")]))
    assert "disk full on the staging host" in result.answer.text and "Wilhelmina" not in result.answer.text
    client.close()


def test_the_rule_sends_every_tool_question_and_no_documentation_question_to_the_tool():
    from ragopt.shipped import shipped_dataset

    tool = CallTool(ToolConfig(call="rule"), None, None, len)

    def asked(name: str) -> list[bool]:
        lines = (shipped_dataset() / name).read_text(encoding="utf-8").splitlines()
        return [tool.wanted(RequestState(query=Query(text=json.loads(line)["question"]))) for line in lines if line]

    assert all(asked("tool_questions.jsonl")) and not any(asked("questions.jsonl") + asked("followups.jsonl"))


LEAKY = {"job": "lab_chem_ingest", "tenant": "north", "status": "failed",
         "failure_reason": "stopped at patient NH5550123-R3; ZEBULON MARCHETTI-OYELARAN paged",  # in another field's text
         "patient_id": "NH5550123-R3", "operator": "Zebulon Marchetti-Oyelaran", "notes": "Quillon Ashdown's chart",
         "steps": [{"step": "extract", "operator": "Odalys Fenwick-Braga", "detail": "resumed by Odalys Fenwick-Braga"},
                   {"step": "load", "detail": "waiting on Quillon Ashdown's chart"}],  # a nested record's own field
         "context": {"last_patient": "NH5550123-R3", "pager": ["Zebulon Marchetti-Oyelaran", "ops"]}}
PLANTED = ("NH5550123-R3", "Marchetti-Oyelaran", "Odalys Fenwick-Braga", "Quillon Ashdown")


def leaky_run(job: str, tenant: str) -> list[dict]:
    return [LEAKY]


@pytest.mark.parametrize("redaction", [True, False])
def test_redacted_values_are_masked_wherever_they_appear_in_the_record(redaction: bool):
    from ragopt.backends.tools import CallableTool

    config = ToolConfig(tool="x:y", call="always", prune=False, redaction=redaction)
    steps = [CallTool(config, CallableTool(leaky_run, "leaky", tuple(LEAKY)), CircuitBreaker("leaky", 3, 60), len),
             BuildPrompt(WordRenderer(), 4000), ExtractiveGenerator(), LiveAnswer()]
    result = Pipeline(steps, inputs=("query", "hits")).run_state(RequestState(
        query=Query(text=QUESTION, tenant="north"), hits=[Hit(chunk=DOC, score=1.0, rank=1, retriever="bm25")]))
    seen = (result.state.prompt.text + result.trace.model_dump_json() + result.answer.model_dump_json()).lower()
    leaked = [v for v in PLANTED if v.lower() in seen]
    if not redaction:  # the same run unredacted: every planted value reaches the prompt
        assert leaked == list(PLANTED)
        return
    assert leaked == [] and "stopped at patient [redacted]; [redacted] paged" in result.state.prompt.text
    assert "'detail': 'waiting on [redacted]'" in result.state.prompt.text and "'ops'" in result.state.prompt.text
    assert result.trace.span("tool").usage.attrs["redacted_fields"] == ["notes", "operator", "patient_id"]


@pytest.mark.parametrize("question, wanted", [
    ("Why did the last collection of LAB_INR fail?", True),
    ("What is the load status of LAB_INR now?", True),
    ("Is the collection schedule of LAB_INR known?", False),  # "now" inside "known"
    ("Which load errors of LAB_INR are lasting?", False),  # "last" inside "lasting"
    ("LAB_INR 最近一次采集加载了多少行？", True),
    ("LAB_INR 的采集失败表现在哪些方面？", False),  # 现在 (now) straddles 表现|在 (shows in)
    ("LAB_INR 的采集状态在题目前面说明了吗？", False),  # 目前 (currently) straddles 题目|前面
])
def test_the_rule_matches_whole_words_in_english_and_chinese(question: str, wanted: bool):
    tool = CallTool(ToolConfig(call="rule"), None, None, len)
    assert tool.wanted(RequestState(query=Query(text=question))) is wanted


def test_pruning_matches_whole_words_too():
    from ragopt.stages.tool import pruned
    from ragopt.text import plain_terms

    record = {"job": "j", "tenant": "t", "status": "failed", "rows_loaded": 0, "failure_reason": "locked"}
    config = ToolConfig()
    # 行 (rows) inside 运行 (run): the question asks why the run failed, not how many rows it loaded
    assert set(pruned(record, plain_terms("它最近一次运行为什么失败？"), config)) == {"job", "tenant", "status", "failure_reason"}
    assert "rows_loaded" in pruned(record, plain_terms("它最近一次加载了多少行？"), config)
