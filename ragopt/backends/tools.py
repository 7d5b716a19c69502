"""Tool clients, no stage logic: a callable with a typed signature, a LangChain `BaseTool`, or an HTTP endpoint
with a JSON schema. Each takes the call's arguments and a time budget and gives back records (dicts).

`call_tool` is the one way a tool is called: under its breaker (ragopt.backends.breaker), in the tool's own worker
threads, within a budget of min(timeout_s, time left to the request's deadline) that counts from when a worker takes
the call up (a wait for a thread is no part of the tool's time), one retry on a connection error within the same
budget. A failure is a `ToolUnavailable` whose `cause` a trace can show: "tool_timeout", "tool_connection",
"tool_error" and "tool_breaker_open" say the tool is unwell and count on the breaker; "tool_busy" (no worker free
within the budget) and "tool_deadline" (the request's deadline cut the budget and ran out) do not. A call never
outlives its budget, though a hung callable's thread does (Python cannot stop it).
"""

from __future__ import annotations

import inspect
import json
import threading
import time
import typing
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping

from ragopt.backends.breaker import CircuitBreaker
from ragopt.errors import InputError, ToolUnavailable

Record = dict[str, Any]
WORKERS_PER_TOOL = 256  # serve's request threads (ragopt.serve.app.create_app's max_workers)


def records(value: Any) -> list[Record]:
    """A tool's return value as records: a dict or pydantic model, a list of them, or JSON text of either."""
    if isinstance(value, str):
        value = json.loads(value)
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return [dict(value)]
    if isinstance(value, list) and all(isinstance(v, Mapping) or hasattr(v, "model_dump") for v in value):
        return [r for v in value for r in records(v)]
    raise ValueError(f"a tool must return an object or a list of objects, got {type(value).__name__}")


def schema_fields(schema: Any, where: str = "schema") -> tuple[str, ...]:
    """The field names a JSON schema of an object (or an array of objects) declares; InputError when it is not one."""
    if isinstance(schema, (str, Path)):
        text = Path(schema).read_text(encoding="utf-8") if Path(str(schema)).suffix == ".json" else str(schema)
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"the tool's JSON schema does not parse: {exc.msg} (line {exc.lineno})", field=where) from None
    if isinstance(schema, Mapping) and schema.get("type") == "array":
        schema = schema.get("items")
    props = schema.get("properties") if isinstance(schema, Mapping) and schema.get("type") == "object" else None
    if not isinstance(props, Mapping) or not props:
        raise InputError('the tool\'s JSON schema must be {"type": "object", "properties": {...}} (or an array of '
                         "such objects)", field=where)
    return tuple(props)


def _return_fields(annotation: Any) -> tuple[str, ...] | None:
    """The fields a return annotation names: a TypedDict or pydantic model, or a list of one; else None."""
    if typing.get_origin(annotation) in (list, typing.List):
        (annotation,) = typing.get_args(annotation) or (None,)
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return tuple(annotation.model_fields)
    if isinstance(annotation, type) and typing.is_typeddict(annotation):
        return tuple(typing.get_type_hints(annotation))
    return None


class _Pooled:
    """A tool's own worker threads, as many as serve runs requests at once (ragopt.serve.app's pool), so that a
    call of a healthy tool never waits for a thread behind other calls. A hung callable's thread outlives its
    call (Python cannot stop it), but each tool has threads of its own, so a stuck tool cannot starve another."""

    def __init__(self, name: str):
        self.name = name
        self.pool = ThreadPoolExecutor(max_workers=WORKERS_PER_TOOL, thread_name_prefix=f"tool-{name}")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class CallableTool(_Pooled):
    """Any callable whose parameters all carry type annotations; its return annotation (a TypedDict or pydantic
    model, or a list of one) says which fields it returns, else `fields` must."""

    def __init__(self, fn: Callable[..., Any], name: str, fields: tuple[str, ...] | None = None):
        super().__init__(name)
        try:
            hints = typing.get_type_hints(fn)
        except Exception as exc:  # an annotation that names nothing importable
            raise InputError(f"tool {name!r}: its type annotations do not resolve: {exc}") from None
        self.params = list(inspect.signature(fn).parameters)
        untyped = [p for p in self.params if p not in hints]
        if untyped:
            raise InputError(f"tool {name!r}: parameter {untyped[0]!r} has no type annotation")
        self.fn = fn
        self.fields = fields or _return_fields(hints.get("return"))

    def invoke(self, args: Mapping[str, Any], timeout_s: float) -> Any:
        return self.fn(**{k: v for k, v in args.items() if k in self.params})


class LangChainTool(_Pooled):
    """A LangChain `BaseTool`: invoked with the arguments its `args` declare; `fields` (from the config's JSON
    schema) say what its result holds, since a BaseTool declares its input only."""

    def __init__(self, tool: Any, name: str, fields: tuple[str, ...] | None = None):
        super().__init__(name)
        self.tool = tool
        self.params = list(getattr(tool, "args", {}) or {})
        self.fields = fields

    def invoke(self, args: Mapping[str, Any], timeout_s: float) -> Any:
        return self.tool.invoke({k: v for k, v in args.items() if k in self.params})


class HttpTool(_Pooled):
    """A URL answering POST {arguments} with JSON records; `fields` come from its JSON schema."""

    def __init__(self, url: str, name: str, fields: tuple[str, ...]):
        super().__init__(name)
        import httpx

        self.url = url
        self.fields = fields
        # as many connections as threads: a call never waits in httpx's pool either (its default is 100)
        self._client = httpx.Client(limits=httpx.Limits(max_connections=WORKERS_PER_TOOL))

    def invoke(self, args: Mapping[str, Any], timeout_s: float) -> Any:
        import httpx

        try:
            response = self._client.post(self.url, json=dict(args), timeout=timeout_s)
        except httpx.ConnectError as exc:
            raise ConnectionError(str(exc)) from None
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc) or "timed out") from None
        response.raise_for_status()
        return response.json()

    def close(self) -> None:
        super().close()
        self._client.close()


class _Call:
    """One call as a worker runs it: its budget, min(timeout_s, time left to the request's deadline), counts from
    when a worker takes it up; a connection error is retried once within the same budget."""

    def __init__(self, tool: Any, args: Mapping[str, Any], timeout_s: float, deadline: float | None):
        self.tool, self.args, self.timeout_s, self.deadline = tool, args, timeout_s, deadline
        self.started = threading.Event()
        self.end = 0.0  # monotonic; set when a worker takes the call
        self.cut = False  # whether the request's deadline, not timeout_s, set the budget

    def budget(self, now: float) -> float:
        return self.timeout_s if self.deadline is None else min(self.timeout_s, self.deadline - now)

    def work(self) -> tuple[Any, int]:
        now = time.monotonic()
        budget = self.budget(now)
        self.end, self.cut = now + budget, budget < self.timeout_s
        self.started.set()
        for attempt in (1, 2):
            left = self.end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no result within {budget:.3g} s")
            try:
                return self.tool.invoke(self.args, left), attempt
            except ConnectionError:
                if attempt == 2 or self.end - time.monotonic() <= 0:
                    raise
        raise AssertionError("unreachable")


def call_tool(tool: Any, args: Mapping[str, Any], timeout_s: float, breaker: CircuitBreaker,
              deadline: float | None = None) -> tuple[list[Record], int]:
    """(records, attempts) from `tool` within min(timeout_s, time left to `deadline`, a time.monotonic() value),
    or ToolUnavailable. The budget bounds the tool's own work: a wait for a free worker is not in it, and a call
    that finds none within the budget ("tool_busy") says nothing of the tool's health, nor does one the request's
    deadline cut short ("tool_deadline"): neither counts on the breaker."""
    if not breaker.allow():
        raise ToolUnavailable("tool_breaker_open", f"tool {breaker.name!r} failed {breaker.failures_to_open} times in a row")
    call = _Call(tool, args, timeout_s, deadline)
    wait_s = call.budget(time.monotonic())
    if wait_s <= 0:
        breaker.neutral()
        raise ToolUnavailable("tool_deadline", "the request's deadline has passed")
    future = tool.pool.submit(call.work)
    if not call.started.wait(wait_s) and future.cancel():
        breaker.neutral()
        raise ToolUnavailable("tool_busy", f"no worker free within {wait_s:.3g} s (every one of the tool's threads is busy)")
    call.started.wait()  # the cancel came too late: a worker has just taken the call
    try:
        found, attempts = future.result(timeout=max(call.end - time.monotonic(), 0.0))
        found = records(found)
    except TimeoutError as exc:  # concurrent.futures' timeout is this one too
        if call.cut:
            breaker.neutral()
            raise ToolUnavailable("tool_deadline", "the request's deadline cut the call short") from None
        breaker.failure()
        raise ToolUnavailable("tool_timeout", str(exc) or f"no result within {timeout_s:.3g} s") from None
    except ConnectionError as exc:
        breaker.failure()
        raise ToolUnavailable("tool_connection", str(exc) or "connection refused") from None
    except Exception as exc:  # the tool's own failure: an HTTP error, bad JSON, an exception in the callable
        breaker.failure()
        raise ToolUnavailable("tool_error", f"{type(exc).__name__}: {exc}") from None
    breaker.success()
    return found, attempts
