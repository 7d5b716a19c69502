"""The serving core behind the HTTP app: one request from API key to answer, through the guards and caches.

    rate limits (key, tenant) and daily quota -> 429
    route (default or small model) -> answer cache -> retrieval cache or retrieval -> admission (slots, KV)
    -> prompt + generation behind a circuit breaker, with fallbacks (small model, extractive) -> caches, cost

Everything here is synchronous (stages are); the app runs `answer` in a worker thread. A `RequestHandle`
lets the app cancel a request whose client went away: the request's deadline becomes "now", which every
generator checks once per token.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from pydantic import Field

from ragopt.config import StrictModel
from ragopt.errors import BadRequest, Refused, SlotRefused
from ragopt.pipeline import REQUEST_INPUTS, Pipeline, RequestState, Step
from ragopt.plan.serving import Backend
from ragopt.serve.caches import CacheScope, ServeCaches
from ragopt.serve.guards import (CircuitBreaker, DailyQuota, FallbackChain, Guarded, PromptGate, RateLimiter,
                                 SkipWhenAnswered, StageDeadline)
from ragopt.serve.metrics import ServeMetrics
from ragopt.serve.scheduler import KeyPolicy, Scheduler, SharedService, TenantPolicy, Ticket, slot_limit
from ragopt.text.routing import Router
from ragopt.types import Hit, Query, Sampling, Turn


class PriceTable(StrictModel):
    """Cost of a request: per 1k model tokens (an API model) and/or per second of generation (a local model
    on hardware rented at `hourly`)."""

    input_per_1k: float = Field(0.0, ge=0)
    output_per_1k: float = Field(0.0, ge=0)
    hourly: float = Field(0.0, ge=0, description="price of the serving machine per hour, charged per generation second")

    def cost(self, tokens_in: int, tokens_out: int, generation_s: float) -> float:
        return tokens_in / 1000 * self.input_per_1k + tokens_out / 1000 * self.output_per_1k + generation_s * self.hourly / 3600


class ServeSettings(StrictModel):
    deadline_s: float = Field(60.0, gt=0, description="per request")
    generate_deadline_s: float | None = Field(None, gt=0, description="per generation stage (None: the request's)")
    max_question_chars: int = Field(4000, gt=0, description="longer questions get 413")
    key_rate_per_s: float = Field(50.0, gt=0)
    key_burst: float = Field(100.0, ge=1)
    tenant_rate_per_s: float = Field(100.0, gt=0)
    tenant_burst: float = Field(200.0, ge=1)
    daily_tokens_per_tenant: int | None = Field(None, gt=0)
    answer_ttl_s: float = Field(3600.0, gt=0)
    retrieval_ttl_s: float = Field(3600.0, gt=0)
    slots: int = Field(1, ge=1, description="requests generating at once (llama-server --parallel)")
    kv_budget_bytes: int | None = Field(None, gt=0)
    queue_timeout_s: float = Field(30.0, gt=0)
    max_queue: int = Field(64, ge=0)
    aging_s: float = Field(10.0, gt=0, description="a waiting request rises one priority class per this many seconds")
    schedule: Literal["fair", "fifo"] = Field("fair", description="fair: per-tenant weighted fair queues; fifo: arrival order")
    serial_prefill: bool = Field(False, description="grant a slot only once every granted request has its first token")
    breaker_failures: int = Field(3, ge=1)
    breaker_reset_s: float = Field(5.0, gt=0)
    small_max_words: int = Field(0, ge=0, description="route questions this short to the small model (0: off)")
    price: PriceTable = PriceTable()


class Serial:
    """Stages run one after another as one stage (a backend's prompt + generation behind one breaker)."""

    def __init__(self, stages: Sequence[Any], name: str):
        self.stages = list(stages)
        self.name = name
        written: set[str] = set()
        reads: list[str] = []
        for s in self.stages:
            reads += [r for r in s.reads if r not in written]
            written |= set(s.writes)
        self.reads = tuple(dict.fromkeys(reads))
        self.writes = tuple(dict.fromkeys(w for s in self.stages for w in s.writes))

    def warm(self) -> None:
        for s in self.stages:
            warm = getattr(s, "warm", None)
            if warm is not None:
                warm()

    def run(self, state: RequestState) -> RequestState:
        for s in self.stages:
            state = s.run(state)
        return state


@dataclass
class Principal:
    key_id: str  # a short hash of the API key, never the key itself
    tenant: str
    scopes: tuple[str, ...]
    key: KeyPolicy = KeyPolicy()
    tenant_policy: TenantPolicy = TenantPolicy()


@dataclass
class AskOptions:
    personal: bool = False
    realtime: bool = False
    deadline_s: float | None = None  # the client's own, at most the service's
    history: list[Turn] = field(default_factory=list)  # the conversation before the question, oldest first
    sampling: Sampling | None = None  # the request's generation options (OpenAI's max_tokens, temperature, stop, seed)
    instructions: str = ""  # the asker's own (a chat's system and developer messages): the prompt's system part

    def cache_options(self, generation: bool) -> dict[str, Any] | None:
        """What besides the question decides a cached value: the conversation (a follow-up is never served another
        conversation's answer or passages) and, for an answer, the generation options."""
        options: dict[str, Any] = {}
        if self.history:
            options["history"] = [[t.role, " ".join(t.content.split())] for t in self.history]
        if generation and self.sampling is not None:
            options["sampling"] = self.sampling.model_dump(mode="json")
        if generation and self.instructions:
            options["instructions"] = self.instructions
        return options or None


@dataclass
class RequestHandle:
    """Created by the app per request; `cancel()` stops its generation at the next token."""

    arrival: float = field(default_factory=time.perf_counter)
    state: RequestState | None = None
    cancelled: bool = False
    on_cancel: list[Callable[[], None]] = field(default_factory=list)  # e.g. leave the scheduler's queue

    def cancel(self) -> None:
        self.cancelled = True
        if self.state is not None:
            self.state.deadline = time.monotonic() - 1.0
        for hook in self.on_cancel:
            hook()


class RagService:
    def __init__(
        self,
        retrieval: Sequence[Any],
        backends: dict[str, Backend],
        extractive: Any,
        settings: ServeSettings,
        caches: ServeCaches,
        kb_version: str,
        retrieval_id: str,
        redis_client: Any = None,
        kv_bytes_per_sequence: float | None = None,
        before: Sequence[Any] = (),
        after: Sequence[Any] = (),
    ):
        """`retrieval` gives the hits (cached per question); then `before` (history), the routed backend's
        prompt and generator, and `after` (citation attribution) answer: the plan's steps in slot order."""
        self.settings = s = settings
        self.caches = caches
        self.kb_version = kb_version
        self.retrieval_id = retrieval_id
        self.backends = backends
        self.metrics = ServeMetrics()
        self.key_limiter = RateLimiter(s.key_rate_per_s, s.key_burst, redis_client, prefix="ragopt:bucket:key:")
        self.tenant_limiter = RateLimiter(s.tenant_rate_per_s, s.tenant_burst, redis_client, prefix="ragopt:bucket:tenant:")
        self.quota = DailyQuota(s.daily_tokens_per_tenant, redis_client) if s.daily_tokens_per_tenant else None
        self.router = Router(s.small_max_words if "small" in backends else 0)
        self.scheduler = Scheduler(slot_limit(s.slots, s.kv_budget_bytes, kv_bytes_per_sequence), queue_timeout_s=s.queue_timeout_s,
                                   max_queue=s.max_queue, aging_s=s.aging_s, policy=s.schedule, serial_prefill=s.serial_prefill,
                                   shared=SharedService(redis_client) if redis_client is not None else None)
        self.metrics.watch_scheduler(self.scheduler)
        self.breakers: dict[str, CircuitBreaker] = {}
        self.retrieve = Pipeline([self._retrieval_step(s) for s in retrieval]) if retrieval else None
        # a tool's call (live data) runs before the request takes a generation slot: a slow tool never holds one
        live = [s for s in before if getattr(s.stage if isinstance(s, Step) else s, "span_kind", None) == "TOOL"]
        self.live = Pipeline(live, inputs=(*REQUEST_INPUTS, "hits")) if live else None
        self.before, self.after = [s for s in before if s not in live], list(after)
        self.pipelines = {name: self._answer_pipeline(name, extractive) for name in backends}
        for name, breaker in self.breakers.items():
            self.metrics.watch_breaker(name, lambda b=breaker: b.state)
        self.servers: dict[str, Any] = {}  # child llama-server processes by backend name, when build_service started them
        self._in_flight = 0
        self._lock = threading.Lock()

    def _breaker(self, name: str) -> CircuitBreaker:
        return self.breakers.setdefault(name, CircuitBreaker(name, self.settings.breaker_failures, self.settings.breaker_reset_s))

    def _retrieval_step(self, stage: Any) -> Any:
        """A stage the request survives (a reranker: the first-stage ranking still answers) runs behind its own
        breaker and is skipped, visibly, when it fails."""
        if isinstance(stage, Step) and not stage.required:  # its spec says a request survives its failure
            return Step(Guarded(stage.stage, self._breaker(stage.stage.name)), required=False)
        return stage

    def _guarded(self, stage: Any, backend: str) -> Guarded:
        if self.settings.generate_deadline_s is not None:
            stage = StageDeadline(stage, self.settings.generate_deadline_s)
        return Guarded(stage, self._breaker(backend))

    def _answer_pipeline(self, route: str, extractive: Any) -> Pipeline:
        """history, then `route`'s prompt stage(s) and its generator behind one breaker (when either fails, the
        other backends, each prompt + generation, in order, then extractive), then attribution."""
        others = [self._guarded(Serial(self.backends[n].stages, name="generate"), n) for n in self.backends if n != route]
        for g in others:
            g.name = f"generate.{g.breaker.name}"
        fallback = FallbackChain([*others, extractive], name="fallback") if others else extractive
        *prompt, generator = self.backends[route].stages
        gated = [Step(PromptGate(p, self._breaker(route)), fallback=fallback) for p in prompt]
        guarded = self._guarded(generator, route)
        generate = Step(SkipWhenAnswered(guarded) if gated else guarded, fallback=fallback)
        return Pipeline([*self.before, *gated, generate, *self.after],
                        inputs=(*REQUEST_INPUTS, "hits"))

    def warm(self) -> None:
        """Load models and indexes now, not in the first request's time."""
        for s in [st.stage for st in (self.retrieve.steps if self.retrieve else [])]:
            warm = getattr(s, "warm", None)
            if warm is not None:
                warm()
        for backend in self.backends.values():
            Serial(backend.stages, "warm").warm()
        Serial([*self.before, *self.after], "warm").warm()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def check_limits(self, principal: Principal) -> None:
        ok, wait = self.key_limiter.take(principal.key_id)
        if not ok:
            self.metrics.rate_limited.labels(reason="key").inc()
            raise Refused("rate limit of this API key", wait, reason="key")
        ok, wait = self.tenant_limiter.take(principal.tenant)
        if not ok:
            self.metrics.rate_limited.labels(reason="tenant").inc()
            raise Refused("rate limit of this tenant", wait, reason="tenant")
        if self.quota is not None and self.quota.exceeded(principal.tenant):
            self.metrics.rate_limited.labels(reason="quota").inc()
            raise Refused("daily token quota of this tenant is spent", self.quota.seconds_to_midnight(), reason="quota")

    def route_for(self, question: str, sampling: Sampling | None) -> str:
        """The router's backend, or the default one when that cannot honour the request's sampling (BadRequest)."""
        route = self.router.route(question)
        if route != "default" and sampling is not None:
            try:
                self.backends[route].check_sampling(sampling)
            except BadRequest:
                route = "default"
        self.backends[route].check_sampling(sampling)
        return route

    def answer(self, question: str, principal: Principal, options: AskOptions, handle: RequestHandle,
               on_token: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Answer one request; returns {"answer", "citations", "trace"}. Raises Refused before any work."""
        self.check_limits(principal)
        with self._lock:
            self._in_flight += 1
            self.metrics.in_flight.set(self._in_flight)
        try:
            return self._answer(question, principal, options, handle, on_token)
        finally:
            with self._lock:
                self._in_flight -= 1
                self.metrics.in_flight.set(self._in_flight)

    def _answer(self, question: str, principal: Principal, options: AskOptions, handle: RequestHandle,
                on_token: Callable[[str], None] | None) -> dict[str, Any]:
        route = self.route_for(question, options.sampling)
        backend = self.backends[route]
        cacheable = self.caches.enabled and self.caches.cacheable(options.personal, options.realtime)
        answer_cacheable = cacheable and self.live is None  # an answer holding live data is never cached
        scope = CacheScope(principal.tenant, principal.scopes, backend.model_id, backend.prompt_version, self.kb_version)
        emitted: list[float] = []
        ticket = Ticket(principal.tenant, principal.key_id, principal.key, principal.tenant_policy, deadline=None)

        def emit(piece: str) -> None:
            emitted.append(time.perf_counter())
            self.scheduler.charge(ticket, 1)  # the tenant's service grows as its answer streams
            if on_token is not None:
                on_token(piece)

        base = {"tenant": principal.tenant, "route": route, "model": backend.model_id, "kb_version": self.kb_version}
        cached = self.caches.answers.get(scope, question, options.cache_options(True)) if answer_cacheable else None
        if cached is not None:
            emit(cached["answer"])
            trace = _trace(base, handle, emitted, cache={"answer": True, "retrieval": None}, saved_tokens=cached.get("tokens", 0),
                           saved_cost=cached.get("cost", 0.0))
            self.metrics.observe(trace, [])
            return {"answer": cached["answer"], "citations": cached["citations"], "trace": trace}
        query = Query(text=question, tenant=principal.tenant, scopes=principal.scopes, history=options.history,
                      instructions=options.instructions)
        state = RequestState(query=query, on_token=emit, arrival=handle.arrival, sampling=options.sampling,
                             deadline=time.monotonic() + min(self.settings.deadline_s, options.deadline_s or self.settings.deadline_s))
        handle.state = state
        if handle.cancelled:
            handle.cancel()
        spans, degraded, retrieval_hit = self._retrieve(state, principal, question, options.cache_options(False) if cacheable else None,
                                                        cacheable)
        if self.live is not None:
            live = self.live.run_state(state)
            spans, degraded = spans + live.trace.spans, degraded + live.trace.degraded
        result, waited = self._generate(state, route, ticket, handle)
        spans += result.trace.spans
        degraded += result.trace.degraded
        trace = self._answer_trace(base, handle, emitted, result, waited, spans, degraded, len(options.history),
                                   cache={"answer": False if answer_cacheable else None, "retrieval": retrieval_hit})
        self.metrics.observe(trace, spans)
        if self.quota is not None:
            self.quota.spend(principal.tenant, trace["tokens_in"] + trace["tokens_out"])
        answer = result.answer
        citations = [c.model_dump(mode="json") for c in (answer.citations if answer else [])]
        text = answer.text if answer else ""
        if answer_cacheable and answer is not None and not degraded and not answer.incomplete:
            self.caches.answers.set(scope, question, {"answer": text, "citations": citations,
                                                        "tokens": trace["tokens_in"] + trace["tokens_out"], "cost": trace["cost"]},
                                    options.cache_options(True))
        return {"answer": text, "citations": citations, "trace": trace}

    def _retrieve(self, state: RequestState, principal: Principal, question: str, key_options: dict[str, Any] | None,
                  cacheable: bool) -> tuple[list[Any], list[str], bool | None]:
        """The hits, from the retrieval cache or the retrieval steps: (spans, degraded, cache hit or None)."""
        if self.retrieve is None:
            return [], [], None
        retrieval_scope = CacheScope(principal.tenant, principal.scopes, self.retrieval_id, "", self.kb_version)
        hits = self.caches.retrieval.get(retrieval_scope, question, key_options) if cacheable else None
        if hits is not None:
            state.hits = [Hit.model_validate(h) for h in hits]
            return [], [], True
        result = self.retrieve.run_state(state)
        if cacheable and not result.trace.degraded:
            self.caches.retrieval.set(retrieval_scope, question, [h.model_dump(mode="json") for h in state.hits], key_options)
        return list(result.trace.spans), list(result.trace.degraded), False if cacheable else None

    def _generate(self, state: RequestState, route: str, ticket: Ticket, handle: RequestHandle) -> tuple[Any, float]:
        """The answer pipeline of `route` once the scheduler gives it a slot: (result, seconds waited for it)."""
        ticket.deadline = state.deadline
        handle.on_cancel.append(lambda: self.scheduler.cancel(ticket))
        if handle.cancelled:
            self.scheduler.cancel(ticket)
        try:
            waited = self.scheduler.acquire(ticket)
        except SlotRefused as exc:
            self.metrics.rate_limited.labels(reason=exc.reason).inc()
            raise
        tokens = (0, 0)
        try:
            result = self.pipelines[route].run_state(state)
            spans = result.trace.spans
            tokens = (sum(s.usage.tokens_in for s in spans), sum(s.usage.tokens_out for s in spans))
            return result, waited
        finally:
            self.scheduler.release(ticket, *tokens)

    def _answer_trace(self, base: dict[str, Any], handle: RequestHandle, emitted: list[float], result: Any, waited: float,
                      spans: list[Any], degraded: list[str], turns: int, cache: dict[str, Any]) -> dict[str, Any]:
        answer = result.answer
        attrs: dict[str, Any] = {}
        for s in result.trace.spans:
            attrs.update({k: v for k, v in s.usage.attrs.items() if v is not None})
        tokens_in = sum(s.usage.tokens_in for s in result.trace.spans)
        tokens_out = sum(s.usage.tokens_out for s in result.trace.spans)
        tpot = attrs.get("tpot_ms")
        if tpot is None and len(emitted) > 1:
            tpot = (emitted[-1] - emitted[0]) * 1000 / (len(emitted) - 1)
        prompt = result.state.prompt
        return _trace(
            base, handle, emitted, cache=cache, tpot_ms=tpot, queue_ms=waited * 1000 + float(attrs.get("queue_ms") or 0.0),
            prefill_ms=attrs.get("prefill_ms"), reused_tokens=attrs.get("reused_tokens"), tokens_in=tokens_in,
            tokens_out=tokens_out, cost=self.settings.price.cost(tokens_in, tokens_out, sum(s.ms for s in result.trace.spans) / 1000),
            degraded=degraded, timed_out=bool(answer is not None and answer.finish_reason == "deadline" and not handle.cancelled),
            finish_reason=answer.finish_reason if answer else None, generator=answer.generator if answer else None,
            hits=[h.chunk.id for h in result.state.hits],
            prompt={"tokens": len(prompt.tokens), "fingerprint": prompt.fingerprint,
                    "instructions_tokens": attrs.get("instructions_tokens", 0)} if prompt is not None else None,
            spans=[s.model_dump(mode="json") for s in spans],
            history={"turns": turns, "summarized_turns": attrs.get("summarized_turns", 0),
                     "trimmed_turns": attrs.get("trimmed_history_turns", 0),
                     "rewritten_query": next((s.usage.attrs["rewritten_query"] for s in spans if "rewritten_query" in s.usage.attrs),
                                             None)} if turns else None,
        )


def _trace(base: dict[str, Any], handle: RequestHandle, emitted: list[float], **fields: Any) -> dict[str, Any]:
    """The response trace, one shape for every answer (a cached one leaves the generation fields at their zero)."""
    now = time.perf_counter()
    trace = {
        **base, "cache": None, "total_ms": (now - handle.arrival) * 1000,
        "ttft_ms": (emitted[0] - handle.arrival) * 1000 if emitted else None, "tpot_ms": None, "queue_ms": 0.0,
        "prefill_ms": None, "reused_tokens": None, "tokens_in": 0, "tokens_out": 0, "saved_tokens": 0, "cost": 0.0,
        "saved_cost": 0.0, "degraded": [], "timed_out": False, "cancelled": handle.cancelled, "finish_reason": None,
        "generator": None, "hits": None, "prompt": None, "spans": [],
        "history": None,  # with a conversation: its turns, how many the history stage summarized, the prompt trimmed
    }
    unknown = set(fields) - set(trace)
    if unknown:
        raise TypeError(f"unknown trace fields {sorted(unknown)}")
    return {**trace, **fields}
