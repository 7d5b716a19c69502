"""Prometheus metrics of one service, in a registry of its own (never the process-global default one, so
two services in one process, e.g. in tests, do not collide). Every name starts with `ragopt_`."""

from __future__ import annotations

from typing import Any, Callable

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TOKEN_TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class ServeMetrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("ragopt_requests", "requests by endpoint and outcome", ["endpoint", "outcome"], registry=r)
        self.request_latency = Histogram("ragopt_request_latency_seconds", "end-to-end latency of answered requests",
                                         buckets=_LATENCY_BUCKETS, registry=r)
        self.stage_latency = Histogram("ragopt_stage_latency_seconds", "latency per pipeline stage", ["stage"],
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("ragopt_ttft_seconds", "time to first token, from arrival", buckets=_LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("ragopt_tpot_seconds", "time per output token", buckets=_TOKEN_TIME_BUCKETS, registry=r)
        self.queue = Histogram("ragopt_queue_seconds", "wait for admission and for the model", buckets=_LATENCY_BUCKETS, registry=r)
        self.tokens_in = Counter("ragopt_tokens_in", "model input tokens", ["tenant"], registry=r)
        self.tokens_out = Counter("ragopt_tokens_out", "model output tokens", ["tenant"], registry=r)
        self.cache_hits = Counter("ragopt_cache_hits", "cache hits", ["cache"], registry=r)
        self.cache_misses = Counter("ragopt_cache_misses", "cache misses", ["cache"], registry=r)
        self.saved_tokens = Counter("ragopt_cache_saved_tokens", "model tokens an answer-cache hit saved", ["tenant"], registry=r)
        self.saved_cost = Counter("ragopt_cache_saved_cost", "cost an answer-cache hit saved (price table)", ["tenant"], registry=r)
        self.rate_limited = Counter("ragopt_rate_limited", "requests refused with 429 or 503 + Retry-After, by reason", ["reason"], registry=r)
        self.timeouts = Counter("ragopt_timeouts", "requests that ran past their deadline", registry=r)
        self.degraded = Counter("ragopt_degraded", "answers from a fallback", registry=r)
        self.cost = Counter("ragopt_cost", "cost from the price table (currency units)", ["tenant"], registry=r)
        self.in_flight = Gauge("ragopt_in_flight", "requests being served now", registry=r)
        self.breaker_state = Gauge("ragopt_breaker_state", "circuit breaker: 0 closed, 1 half-open, 2 open", ["breaker"], registry=r)

    def watch_scheduler(self, scheduler: Any) -> None:
        """Per tenant, read at scrape time: weighted service, running and waiting requests; refusals by reason."""
        self.registry.register(_SchedulerCollector(scheduler))

    def watch_breaker(self, name: str, state: Callable[[], str]) -> None:
        codes = {"closed": 0, "half_open": 1, "open": 2}
        self.breaker_state.labels(breaker=name).set_function(lambda: codes.get(state(), -1))

    def observe(self, trace: dict[str, Any], spans: list[Any]) -> None:
        """Record one answered request from its service trace (see `RagService.answer`)."""
        tenant = trace.get("tenant") or "-"
        self.request_latency.observe(trace["total_ms"] / 1000)
        for s in spans:
            if not s.skipped:
                self.stage_latency.labels(stage=s.name).observe(s.ms / 1000)
        for hist, key in ((self.ttft, "ttft_ms"), (self.tpot, "tpot_ms"), (self.queue, "queue_ms")):
            if trace.get(key) is not None:
                hist.observe(trace[key] / 1000)
        self.tokens_in.labels(tenant=tenant).inc(trace["tokens_in"])
        self.tokens_out.labels(tenant=tenant).inc(trace["tokens_out"])
        self.cost.labels(tenant=tenant).inc(trace["cost"])
        for cache, hit in (trace.get("cache") or {}).items():
            if hit is not None:
                (self.cache_hits if hit else self.cache_misses).labels(cache=cache).inc()
        if trace.get("saved_tokens"):
            self.saved_tokens.labels(tenant=tenant).inc(trace["saved_tokens"])
            self.saved_cost.labels(tenant=tenant).inc(trace.get("saved_cost") or 0.0)
        if trace.get("degraded"):
            self.degraded.inc()
        if trace.get("timed_out"):
            self.timeouts.inc()

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _SchedulerCollector:
    def __init__(self, scheduler: Any):
        self.scheduler = scheduler

    def describe(self) -> list:
        return []  # collected at scrape time only (tenants appear as they send)

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        snap = self.scheduler.snapshot()
        service = CounterMetricFamily("ragopt_weighted_service", "model tokens served / tenant weight (the fair queue's counter)",
                                      labels=["tenant"])
        running = GaugeMetricFamily("ragopt_scheduler_running", "requests holding a generation slot", labels=["tenant"])
        waiting = GaugeMetricFamily("ragopt_scheduler_waiting", "requests waiting for a generation slot", labels=["tenant"])
        for tenant, row in snap.items():
            service.add_metric([tenant], row["service"])
            running.add_metric([tenant], row["running"])
            waiting.add_metric([tenant], row["waiting"])
        refused = CounterMetricFamily("ragopt_scheduler_refused", "requests refused before taking a slot, by reason", labels=["reason"])
        for reason, n in sorted(self.scheduler.refused.items()):
            refused.add_metric([reason], n)
        yield from (service, running, waiting, refused)
