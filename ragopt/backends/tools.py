"""Tool clients, no stage logic: a callable with a typed signature, a LangChain `BaseTool`, or an HTTP endpoint
with a JSON schema. Each takes the call's arguments and a time budget and gives back records (dicts).

`call_tool` is the one way a tool is called: under its breaker (one per tool, ragopt.backends.breaker), every
attempt run in the tool's own worker threads and waited for at most the budget left, one retry on a connection
error within the same budget. A failure is a `ToolUnavailable` whose `cause` a trace can show ("tool_timeout",
"tool_connection", "tool_error", "tool_breaker_open"); a call never outlives its budget, though a hung callable's
thread does (Python cannot stop it), so each tool has a few threads of its own and a stuck tool cannot starve
another.
"""

from __future__ import annotations

import inspect
import json
import time
import typing
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, Callable, Mapping

from ragopt.backends.breaker import CircuitBreaker
from ragopt.errors import InputError, ToolUnavailable

Record = dict[str, Any]
WORKERS_PER_TOOL = 4


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


class _Threads:
    """Runs one call in the tool's own worker threads and waits for it at most `timeout_s`."""

    def __init__(self, name: str):
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=WORKERS_PER_TOOL, thread_name_prefix=f"tool-{name}")

    def run(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        future = self._pool.submit(fn)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"no result within {timeout_s:.3g} s") from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class CallableTool(_Threads):
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

    def __call__(self, args: Mapping[str, Any], timeout_s: float) -> list[Record]:
        kwargs = {k: v for k, v in args.items() if k in self.params}
        return records(self.run(lambda: self.fn(**kwargs), timeout_s))


class LangChainTool(_Threads):
    """A LangChain `BaseTool`: invoked with the arguments its `args` declare; `fields` (from the config's JSON
    schema) say what its result holds, since a BaseTool declares its input only."""

    def __init__(self, tool: Any, name: str, fields: tuple[str, ...] | None = None):
        super().__init__(name)
        self.tool = tool
        self.params = list(getattr(tool, "args", {}) or {})
        self.fields = fields

    def __call__(self, args: Mapping[str, Any], timeout_s: float) -> list[Record]:
        kwargs = {k: v for k, v in args.items() if k in self.params}
        return records(self.run(lambda: self.tool.invoke(kwargs), timeout_s))


class HttpTool(_Threads):
    """A URL answering POST {arguments} with JSON records; `fields` come from its JSON schema."""

    def __init__(self, url: str, name: str, fields: tuple[str, ...]):
        super().__init__(name)
        import httpx

        self.url = url
        self.fields = fields
        self._client = httpx.Client()

    def _post(self, args: Mapping[str, Any], timeout_s: float) -> Any:
        import httpx

        try:
            response = self._client.post(self.url, json=dict(args), timeout=timeout_s)
        except httpx.ConnectError as exc:
            raise ConnectionError(str(exc)) from None
        except httpx.TimeoutException as exc:
            raise TimeoutError(str(exc) or "timed out") from None
        response.raise_for_status()
        return response.json()

    def __call__(self, args: Mapping[str, Any], timeout_s: float) -> list[Record]:
        return records(self.run(lambda: self._post(args, timeout_s), timeout_s))

    def close(self) -> None:
        super().close()
        self._client.close()


def call_tool(tool: Any, args: Mapping[str, Any], timeout_s: float, breaker: CircuitBreaker) -> tuple[list[Record], int]:
    """(records, attempts) from `tool` within `timeout_s` in all, or ToolUnavailable. A connection error is
    retried once if budget is left; a timeout or any other error is not."""
    if not breaker.allow():
        raise ToolUnavailable("tool_breaker_open", f"tool {breaker.name!r} failed {breaker.failures_to_open} times in a row")
    deadline = time.monotonic() + timeout_s
    for attempt in (1, 2):
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError(f"no result within {timeout_s:.3g} s")
            found = tool(args, left)
        except ConnectionError as exc:
            if attempt == 1 and deadline - time.monotonic() > 0:
                continue
            breaker.failure()
            raise ToolUnavailable("tool_connection", str(exc) or "connection refused") from None
        except TimeoutError as exc:
            breaker.failure()
            raise ToolUnavailable("tool_timeout", str(exc)) from None
        except Exception as exc:  # the tool's own failure: an HTTP error, bad JSON, an exception in the callable
            breaker.failure()
            raise ToolUnavailable("tool_error", f"{type(exc).__name__}: {exc}") from None
        breaker.success()
        return found, attempt
    raise AssertionError("unreachable")
