"""Tool clients: a typed callable, a LangChain tool and an HTTP tool, each under a timeout that bounds the tool's own
work (not a wait for a worker, and cut to the request's deadline), one retry on a connection error within the
budget, and a breaker that only the tool's own failures move."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TypedDict

import pytest

from ragopt.backends.breaker import CircuitBreaker
from ragopt.backends.tools import CallableTool, HttpTool, LangChainTool, call_tool, schema_fields
from ragopt.errors import InputError, ToolUnavailable


class Status(TypedDict):
    job: str
    status: str


def status(job: str, tenant: str) -> Status:
    return {"job": job, "status": f"ok for {tenant}"}


def test_a_typed_callable_gives_records_and_its_fields():
    tool = CallableTool(status, "status")
    assert tool.fields == ("job", "status")
    found, attempts = call_tool(tool, {"job": "j1", "tenant": "t", "unused": 1}, 2.0, CircuitBreaker("status"))
    assert found == [{"job": "j1", "status": "ok for t"}] and attempts == 1


def test_an_untyped_parameter_is_refused():
    with pytest.raises(InputError, match="parameter 'job' has no type annotation"):
        CallableTool(lambda job: {}, "untyped")


def test_a_slow_tool_times_out_within_its_budget():
    def slow(job: str) -> Status:
        time.sleep(3)
        return {"job": job, "status": "late"}

    tool = CallableTool(slow, "slow")
    t0 = time.perf_counter()
    with pytest.raises(ToolUnavailable) as exc:
        call_tool(tool, {"job": "j"}, 0.3, CircuitBreaker("slow"))
    assert exc.value.cause == "tool_timeout"
    assert time.perf_counter() - t0 < 0.3 + 0.5


def test_one_retry_on_a_connection_error_and_no_more():
    calls = []

    def flaky(job: str) -> Status:  # the injected fault: the first connection is refused
        calls.append(job)
        if len(calls) == 1:
            raise ConnectionRefusedError("refused")
        return {"job": job, "status": "ok"}

    found, attempts = call_tool(CallableTool(flaky, "flaky"), {"job": "j"}, 2.0, CircuitBreaker("flaky"))
    assert attempts == 2 and found[0]["status"] == "ok"

    def down(job: str) -> Status:
        calls.append(job)
        raise ConnectionRefusedError("refused")

    calls.clear()
    with pytest.raises(ToolUnavailable) as exc:
        call_tool(CallableTool(down, "down"), {"job": "j"}, 2.0, CircuitBreaker("down"))
    assert exc.value.cause == "tool_connection" and len(calls) == 2


def test_the_breaker_opens_after_repeated_failures_and_then_refuses_at_once():
    def broken(job: str) -> Status:
        raise RuntimeError("boom")

    breaker = CircuitBreaker("broken", failures=2, reset_s=60)
    tool = CallableTool(broken, "broken")
    for _ in range(2):
        with pytest.raises(ToolUnavailable, match="tool_error"):
            call_tool(tool, {"job": "j"}, 1.0, breaker)
    with pytest.raises(ToolUnavailable) as exc:
        call_tool(tool, {"job": "j"}, 1.0, breaker)
    assert exc.value.cause == "tool_breaker_open" and breaker.state == "open"


def test_a_langchain_tool_is_invoked_with_its_declared_arguments():
    from langchain_core.tools import tool as lc_tool

    @lc_tool
    def job_status(job: str) -> dict:
        """The latest run of a job."""
        return {"job": job, "status": "failed"}

    found, _ = call_tool(LangChainTool(job_status, "job_status", ("job", "status")), {"job": "j", "tenant": "t"}, 2.0,
                         CircuitBreaker("lc"))
    assert found == [{"job": "j", "status": "failed"}]


def test_json_schemas_that_do_not_parse_or_name_no_fields_are_refused():
    assert schema_fields('{"type": "array", "items": {"type": "object", "properties": {"a": {}, "b": {}}}}') == ("a", "b")
    with pytest.raises(InputError, match="does not parse"):
        schema_fields('{"type": "object", "properties": ')
    with pytest.raises(InputError, match="must be"):
        schema_fields('{"type": "string"}')


def test_an_http_tool_on_a_closed_port_fails_as_a_connection_error():
    from ragopt.backends.child_server import free_port

    tool = HttpTool(f"http://127.0.0.1:{free_port()}/status", "nobody", ("job",))
    t0 = time.perf_counter()
    with pytest.raises(ToolUnavailable) as exc:
        call_tool(tool, {"job": "j"}, 1.0, CircuitBreaker("nobody"))
    assert exc.value.cause == "tool_connection" and time.perf_counter() - t0 < 1.5
    tool.close()


def test_a_wait_for_a_worker_is_not_the_tools_time_nor_a_failure(monkeypatch: pytest.MonkeyPatch):
    from ragopt.backends import tools

    monkeypatch.setattr(tools, "WORKERS_PER_TOOL", 1)  # one worker, so that the second call must wait for it
    taken, release = threading.Event(), threading.Event()

    def job_status(job: str, hold: bool) -> Status:
        if hold:
            taken.set()
            release.wait(30)
        else:
            time.sleep(0.6)
        return {"job": job, "status": "ok"}

    tool, breaker = CallableTool(job_status, "one-worker"), CircuitBreaker("one-worker", failures=1)
    with ThreadPoolExecutor(max_workers=2) as pool:
        holder = pool.submit(call_tool, tool, {"job": "a", "hold": True}, 30.0, breaker)
        taken.wait(30)
        waiter = pool.submit(call_tool, tool, {"job": "b", "hold": False}, 1.0, breaker)
        time.sleep(0.6)
        release.set()
        # the waiter waited 0.6 s for the worker and then worked 0.6 s: past 1 s in all, within its 1 s of work
        assert waiter.result()[0] == [{"job": "b", "status": "ok"}] and holder.result()[1] == 1
    release.clear()
    with ThreadPoolExecutor(max_workers=1) as pool:
        holder = pool.submit(call_tool, tool, {"job": "a", "hold": True}, 30.0, breaker)
        taken.wait(30)
        with pytest.raises(ToolUnavailable) as exc:  # no worker free within the budget: the tool is not to blame
            call_tool(tool, {"job": "b", "hold": False}, 0.3, breaker)
        assert exc.value.cause == "tool_busy" and breaker.state == "closed" and breaker.consecutive_failures == 0
        release.set()
        holder.result()
    tool.close()


def test_the_budget_is_cut_to_the_requests_deadline_and_that_is_no_failure():
    def slow(job: str) -> Status:
        time.sleep(2)
        return {"job": job, "status": "late"}

    tool, breaker = CallableTool(slow, "slow-deadline"), CircuitBreaker("slow-deadline", failures=1)
    for left_s in (0.2, -1.0):  # some time left, less than timeout_s; none at all
        with pytest.raises(ToolUnavailable) as exc:
            call_tool(tool, {"job": "j"}, 10.0, breaker, deadline=time.monotonic() + left_s)
        assert exc.value.cause == "tool_deadline" and breaker.state == "closed" and breaker.consecutive_failures == 0
    with pytest.raises(ToolUnavailable) as exc:  # its own timeout, the request's deadline far: the tool is slow
        call_tool(tool, {"job": "j"}, 0.2, breaker, deadline=time.monotonic() + 60)
    assert exc.value.cause == "tool_timeout" and breaker.state == "open"
    tool.close()
