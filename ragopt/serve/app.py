"""The HTTP face of `RagService` (FastAPI): `/v1/ask`, OpenAI-compatible `/v1/chat/completions` and `/v1/models`
(ragopt.serve.openai_shape), `/healthz`, `/metrics`. A conversation's earlier turns (`history` on /v1/ask, the
earlier messages of a chat) reach the plan's rewrite and history stages, as a sweep's follow-up questions do.

Tenant and scopes come only from the API key (`Authorization: Bearer KEY`, mapped in a JSON file); the body
never names them. Errors, in OpenAI's shape on every `/v1/*` route (ragopt.serve.openai_errors: `{"error":
{"message", "type", "param", "code"}}`): 401 unknown key, 400 malformed body or a field ragopt cannot honour (`param`
names it), 413 question too long, 429 (rate limit, quota, no generation slot) and 503 (a deadline that cannot be
met) with Retry-After. Streams are server-sent events: one `token` event per piece, then a `done` event whose
data is {"answer", "citations", "trace"}. A client that goes away cancels its request: the generator stops at its
next token.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from pydantic import BaseModel, ConfigDict, Field

from ragopt.errors import BadRequest, InputError, Refused
from ragopt.serve import openai_errors
from ragopt.serve.openai_shape import ChatBody, ChatRender, chat_request, models_list
from ragopt.serve.scheduler import KeyPolicy, TenantPolicy
from ragopt.serve.service import AskOptions, Principal, RagService, RequestHandle
from ragopt.types import Turn

# FastAPI is imported at module level (it reads the endpoints' annotations); only `ragopt serve` imports this.


class _KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1)
    scopes: list[str] = []
    weight: float = Field(1.0, gt=0, le=1000, description="share of the tenant's service among its keys")
    max_concurrency: int | None = Field(None, ge=1, description="requests of this key generating at once")
    priority: int = Field(0, ge=0, le=9, description="higher classes get free slots first (waiting ages a request up)")
    reserved_slots: int = Field(0, ge=0, description="slots held for this key however many others wait")


class _TenantEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weight: float = Field(1.0, gt=0, le=1000, description="share of the generation slots' service")
    max_concurrency: int | None = Field(None, ge=1, description="requests of this tenant generating at once")


def _entry(model: type[BaseModel], value: Any, where: str, path: str | Path) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first["loc"]) or "entry"
        raise InputError(f"{where}: {name}: {first['msg']}", path=path, field="--api-keys") from None


def load_api_keys(path: str | Path) -> dict[str, Principal]:
    """{"KEY": {"tenant": "acme", "scopes": ["staff"], "weight"?, "max_concurrency"?, "priority"?, "reserved_slots"?}}, or
    {"keys": {that}, "tenants": {"acme": {"weight"?, "max_concurrency"?}}} -> key -> Principal; any flaw is an InputError."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("file not found", path=path, field="--api-keys") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path=path, line=exc.lineno, field="--api-keys") from None
    tenants: dict[str, Any] = {}
    if isinstance(data, dict) and isinstance(data.get("keys"), dict) and set(data) <= {"keys", "tenants"} \
            and all(isinstance(v, dict) for v in data["keys"].values()):
        tenants = data.get("tenants") or {}
        if not isinstance(tenants, dict):
            raise InputError("\"tenants\" must map each tenant to {\"weight\", \"max_concurrency\"}", path=path, field="--api-keys")
        data = data["keys"]
    if not isinstance(data, dict) or not data:
        raise InputError("expected a JSON object mapping each API key to {\"tenant\": ..., \"scopes\": [...]}", path=path, field="--api-keys")
    policies = {name: TenantPolicy(**_entry(_TenantEntry, v, f"tenant {name!r}", path).model_dump()) for name, v in tenants.items()}
    keys = {}
    for key, value in data.items():
        entry = _entry(_KeyEntry, value, f"key {key[:4]}...", path)
        if not all(entry.scopes):
            raise InputError(f"key {key[:4]}...: scopes must be non-empty strings", path=path, field="--api-keys")
        key_id = hashlib.sha256(key.encode()).hexdigest()[:12]
        policy = KeyPolicy(weight=entry.weight, max_concurrency=entry.max_concurrency, priority=entry.priority,
                           reserved_slots=entry.reserved_slots)
        keys[key] = Principal(key_id=key_id, tenant=entry.tenant, scopes=tuple(sorted(set(entry.scopes))), key=policy,
                              tenant_policy=policies.get(entry.tenant, TenantPolicy()))
    unknown = sorted(set(policies) - {p.tenant for p in keys.values()})
    if unknown:
        raise InputError(f"tenant {unknown[0]!r} has no key", path=path, field="--api-keys")
    return keys


def check_reservations(keys: dict[str, Principal], slots: int, path: str | Path) -> None:
    """The keys' reserved slots must leave at least one slot for everyone else."""
    reserved = sum(p.key.reserved_slots for p in keys.values())
    if reserved and reserved >= slots:
        raise InputError(f"reserved_slots add up to {reserved}, but only {slots} slots serve (--slots/--parallel): "
                         "keep at least one unreserved", path=path, field="--api-keys")


class AskBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1)
    stream: bool = False
    personal: bool = Field(False, description="depends on who asks beyond tenant and scopes: never cached")
    realtime: bool = Field(False, description="must be fresh: never cached")
    deadline_s: float | None = Field(None, gt=0, le=3600, description="refused (503) rather than answered later than this")
    history: list[Turn] = Field([], description="the conversation before this question, oldest first")
    instructions: str = Field("", description="the asker's own instructions: the prompt's system part, never trimmed")


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class AskRender:
    whole = staticmethod(lambda out: out)
    token = staticmethod(lambda piece: _sse("token", {"text": piece}))
    done = staticmethod(lambda out: [_sse("done", out)])


class _Requests:
    """One request from HTTP to `RagService.answer` and back: a worker thread, its tokens on a queue, the
    client's disconnect watched, the outcome counted."""

    def __init__(self, service: RagService, keys: dict[str, Principal], pool: ThreadPoolExecutor, tracing: Any = None):
        self.service, self.keys, self.pool = service, keys, pool
        self.tracing = tracing  # a ragopt.observe.served_traces.ServedTraces when traces are exported, else None

    def error(self, status: int, body: dict[str, Any], endpoint: str, outcome: str, headers: dict[str, str] | None = None) -> Any:
        """`body`: OpenAI's error shape (ragopt.serve.openai_errors)."""
        self.service.metrics.requests.labels(endpoint=endpoint, outcome=outcome).inc()
        return JSONResponse(body, status_code=status, headers=headers)

    def principal_of(self, request: Request) -> Principal:
        """A dependency, so an unknown key is 401 before the body is even validated."""
        auth = request.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        principal = self.keys.get(token.strip()) if scheme.lower() == "bearer" else None
        if principal is None:
            self.service.metrics.requests.labels(endpoint=request.url.path, outcome="unauthorized").inc()
            raise HTTPException(401, "unknown or missing API key (Authorization: Bearer KEY)")
        return principal

    async def start(self, question: str, principal: Principal, options: AskOptions,
                    headers: dict[str, str]) -> tuple[RequestHandle, asyncio.Queue]:
        """Run the request in a worker thread; its tokens and its end arrive on the queue. Its trace (when switched
        on) is queued for the exporter process after the answer is handed over, so that the queue's feeder thread
        pickles it while the reply goes out, not before; it joins the caller's trace from `headers`."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        handle = RequestHandle()

        def on_token(piece: str) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, ("token", piece))

        def work() -> None:
            try:
                out = self.service.answer(question, principal, options, handle, on_token)
                loop.call_soon_threadsafe(queue.put_nowait, ("done", out))
            except BaseException as exc:  # noqa: BLE001 - handed to the event loop, which answers for it
                loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))
                return
            if self.tracing is not None:
                self.tracing.export_served_later(out, question, headers)  # built by the exporter process

        loop.run_in_executor(self.pool, work)
        return handle, queue

    def refusal(self, exc: BaseException, endpoint: str) -> Any:
        """The answer to a request the service turned away (Refused: 429/503 with Retry-After), found it could not
        honour (BadRequest: 400 naming the field; some are found only once the request is laid out, e.g. its
        instructions' tokens) or failed on (500)."""
        if isinstance(exc, Refused):
            retry = str(max(1, int(exc.retry_after_s + 0.999)))
            outcome = "rate_limited" if exc.status == 429 else "refused"
            return self.error(exc.status, openai_errors.refusal(exc), endpoint, outcome, headers={"Retry-After": retry})
        if isinstance(exc, BadRequest):
            return self.error(400, openai_errors.bad_request(exc), endpoint, "invalid")
        return self.error(500, openai_errors.by_status(500, f"{type(exc).__name__}: {exc}"), endpoint, "error")

    def too_long(self, question: str, endpoint: str) -> Any:
        limit = self.service.settings.max_question_chars
        if len(question) > limit:
            param = "question" if endpoint == "/v1/ask" else "messages"  # a chat's question is its last message
            body = openai_errors.by_status(413, f"{param}: a question of {len(question)} characters; at most {limit}", param)
            return self.error(413, body, endpoint, "too_long")
        return None

    @staticmethod
    async def next_event(queue: asyncio.Queue, handle: RequestHandle, request: Request) -> tuple[str, Any] | None:
        """The next token or the end; None when the client left first (the request is then cancelled). The
        client is checked every 0.25 s even while tokens keep coming (a plain JSON answer sends nothing back
        until its end, so only this check sees its client leave)."""
        while True:
            now = time.monotonic()
            if now >= getattr(request.state, "next_check", 0.0):
                request.state.next_check = now + 0.25
                if await request.is_disconnected():
                    handle.cancel()
                    return None
            try:
                return await asyncio.wait_for(queue.get(), timeout=0.25)
            except asyncio.TimeoutError:
                continue

    def cancelled(self, endpoint: str) -> Any:
        self.service.metrics.requests.labels(endpoint=endpoint, outcome="cancelled").inc()
        return Response(status_code=499)

    async def run(self, request: Request, principal: Principal, question: str, options: AskOptions, stream: bool,
                  endpoint: str, render: Any) -> Any:
        refused = self.too_long(question, endpoint)
        if refused is not None:
            return refused
        handle, queue = await self.start(question, principal, options,
                                         {k: v for k, v in request.headers.items() if k in ("traceparent", "tracestate")})
        first = await self.next_event(queue, handle, request)
        if first is None:
            return self.cancelled(endpoint)
        if first[0] == "error":
            return self.refusal(first[1], endpoint)
        if not stream:
            return await self.whole(first, queue, handle, request, endpoint, render)
        return StreamingResponse(self.events(first, queue, handle, endpoint, render), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def whole(self, event: tuple[str, Any], queue: asyncio.Queue, handle: RequestHandle, request: Request,
                    endpoint: str, render: Any) -> Any:
        """A JSON answer once the request is done (tokens are collected by the service)."""
        while event[0] == "token":
            got = await self.next_event(queue, handle, request)
            if got is None:
                return self.cancelled(endpoint)
            event = got
        if event[0] == "error":
            return self.refusal(event[1], endpoint)
        self.service.metrics.requests.labels(endpoint=endpoint, outcome="ok").inc()
        return JSONResponse(render.whole(event[1]))

    async def events(self, event: tuple[str, Any], queue: asyncio.Queue, handle: RequestHandle, endpoint: str,
                     render: Any) -> AsyncIterator[bytes]:
        outcome = "cancelled"
        try:
            while True:
                kind, data = event
                if kind == "token":
                    yield render.token(data)
                elif kind == "done":
                    outcome = "ok"
                    for chunk in render.done(data):
                        yield chunk
                    return
                else:
                    outcome = "error"
                    yield _sse("error", openai_errors.by_status(500, f"{type(data).__name__}: {data}"))
                    return
                event = await queue.get()
        finally:
            if outcome == "cancelled":
                handle.cancel()  # the client went away mid-stream: stop generating
            self.service.metrics.requests.labels(endpoint=endpoint, outcome=outcome).inc()


def create_app(service: RagService, keys: dict[str, Principal], max_workers: int = 256, tracing: Any = None) -> Any:
    """`tracing`: a ragopt.observe.served_traces.ServedTraces that exports each answered request's trace (None: no
    export)."""
    app = FastAPI(title="ragopt serve")
    started = int(time.time())
    pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="ragopt-serve")
    app.router.on_shutdown.append(lambda: pool.shutdown(wait=False, cancel_futures=True))
    requests = _Requests(service, keys, pool, tracing)
    for p in keys.values():
        service.scheduler.register(p.tenant, p.key_id, p.key, p.tenant_policy)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Any:
        return requests.error(400, openai_errors.invalid_body(list(exc.errors())), request.url.path, "invalid")

    @app.exception_handler(StarletteHTTPException)  # FastAPI's own 404/405 as well as ours
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Any:
        if request.url.path.startswith("/v1/"):
            body = openai_errors.by_status(exc.status_code, str(exc.detail))
        else:
            body = {"error": exc.detail}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.post("/v1/ask")
    async def ask(body: AskBody, request: Request, principal: Principal = Depends(requests.principal_of)) -> Any:
        options = AskOptions(body.personal, body.realtime, body.deadline_s, history=body.history, instructions=body.instructions)
        return await requests.run(request, principal, body.question, options, body.stream, "/v1/ask", AskRender)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatBody, request: Request, principal: Principal = Depends(requests.principal_of)) -> Any:
        try:
            chat = chat_request(body)
        except BadRequest as exc:
            return requests.error(400, openai_errors.bad_request(exc), "/v1/chat/completions", "invalid")
        options = AskOptions(history=chat.history, sampling=chat.sampling, instructions=chat.instructions)
        return await requests.run(request, principal, chat.question, options, body.stream, "/v1/chat/completions",
                                  ChatRender(body.model, chat.include_usage))

    @app.get("/v1/models")
    async def models(principal: Principal = Depends(requests.principal_of)) -> Any:
        return models_list(["ragopt"], started)

    @app.get("/healthz")
    async def healthz() -> Any:
        return {"status": "ok", "in_flight": service.in_flight,
                "breakers": {name: b.state for name, b in service.breakers.items()}}

    @app.get("/metrics")
    async def metrics() -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return app
