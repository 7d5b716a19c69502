"""`ragopt loadtest`: drive a `ragopt serve` (or any service with its /v1/ask) over HTTP and report what users
would feel.

Arrivals are Poisson at `rate` requests/s (open loop: a slow server does not slow the arrivals) or come from
`concurrency` clients that each send the next request when the last one ends (closed loop). Questions mix
short ones and long ones (`long_fraction`). Sending stops after `duration_s` or `max_requests`; requests
still running then are awaited (each bounded by `timeout_s`), so every request sent is counted exactly once:
ok, rate_limited (429), refused (503 with Retry-After: a deadline the server could not meet), timed_out (client timeout, or the server's deadline cut the answer), or errors.

Little's law: the arrival rate over the sending window x the mean latency predicts the mean number of requests
in flight; the measurement is the time-average of the in-flight count over the same window, integrated
exactly at every change (sampling it from the same event loop would be biased toward idle moments, when
the loop is free to wake a sampler).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Sequence

from ragopt.errors import BackendError
from ragopt.serve.loadspec import LONG_PREAMBLE, LoadSpec, TenantLoad
from ragopt.trace import percentiles


@dataclass
class Outcome:
    kind: str  # "short" / "long"
    start_s: float  # from the start of the test
    end_s: float = 0.0
    status: str = "error"  # ok / rate_limited / timed_out / error
    http_status: int | None = None
    ttft_ms: float | None = None  # client-side: request sent -> first token event
    server_ttft_ms: float | None = None
    tpot_ms: float | None = None
    queue_ms: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    cache_hit: bool = False
    saved_tokens: int = 0
    saved_cost: float = 0.0
    tenant: str | None = None
    error: str | None = None

    @property
    def latency_ms(self) -> float:
        return (self.end_s - self.start_s) * 1000


def _question(rng: random.Random, spec: LoadSpec) -> tuple[str, str]:
    q = rng.choice(spec.questions)
    if rng.random() < spec.long_fraction:
        return "long", LONG_PREAMBLE * 2 + q
    return "short", q


async def _one(client: Any, spec: LoadSpec, key: str, kind: str, question: str, t0: float) -> Outcome:
    import httpx

    out = Outcome(kind=kind, start_s=time.perf_counter() - t0)
    sent = time.perf_counter()
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with asyncio.timeout(spec.timeout_s):
            async with client.stream("POST", "/v1/ask", json={"question": question, "stream": spec.stream}, headers=headers) as r:
                out.http_status = r.status_code
                if r.status_code != 200:
                    body = (await r.aread()).decode(errors="replace")
                    refused = r.status_code == 503 and "retry-after" in r.headers  # a deadline it could not meet
                    out.status = "rate_limited" if r.status_code == 429 else "refused" if refused else "error"
                    out.error = None if out.status != "error" else f"HTTP {r.status_code}: {body[:200]}"
                    return out
                final = await _read_answer(r, spec.stream, lambda: setattr(out, "ttft_ms", out.ttft_ms or (time.perf_counter() - sent) * 1000))
        trace = final.get("trace") or {}
        out.server_ttft_ms, out.tpot_ms, out.queue_ms = trace.get("ttft_ms"), trace.get("tpot_ms"), trace.get("queue_ms")
        out.tokens_in, out.tokens_out = int(trace.get("tokens_in") or 0), int(trace.get("tokens_out") or 0)
        out.cost, out.tenant = float(trace.get("cost") or 0.0), trace.get("tenant")
        out.cache_hit = bool((trace.get("cache") or {}).get("answer"))
        out.saved_tokens = int(trace.get("saved_tokens") or 0)
        out.saved_cost = float(trace.get("saved_cost") or 0.0)
        out.status = "timed_out" if trace.get("timed_out") else "ok"
    except TimeoutError:
        out.status, out.error = "timed_out", f"no complete answer within {spec.timeout_s:g} s"
    except (httpx.HTTPError, BackendError, ValueError, KeyError) as exc:  # ValueError: a body that is not the JSON promised
        out.status, out.error = "error", f"{type(exc).__name__}: {exc}"
    finally:
        out.end_s = time.perf_counter() - t0
    return out


async def _read_answer(r: Any, stream: bool, first_token: Callable[[], None]) -> dict[str, Any]:
    if not stream:
        first_token()
        return json.loads(await r.aread())
    event = None
    async for line in r.aiter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            if event == "token":
                first_token()
            elif event == "done":
                return json.loads(line[5:])
            elif event == "error":
                raise BackendError(f"server error event: {line[5:200]}")
    raise BackendError("the stream ended without a done event")


class _LoadRun:
    """What one load test's requests share: the sending window, what was sent and what came back, and the
    in-flight count's integral over the sending window (updated exactly at every change)."""

    def __init__(self, spec: LoadSpec, client: Any, rng: random.Random, t0: float,
                 progress: Callable[[Outcome], None] | None):
        self.spec = spec
        self.client = client
        self.rng = rng
        self.t0 = t0
        self.progress = progress
        self.stop_at = t0 + spec.duration_s
        self.outcomes: list[Outcome] = []
        self.sent = 0
        self.in_flight = 0
        self.area = 0.0  # integral of the in-flight count over time, up to the end of the sending window
        self.last_change = 0.0
        self.sending = True
        self.in_flight_at_close = 0

    def may_send(self) -> bool:
        return time.perf_counter() < self.stop_at and (self.spec.max_requests is None or self.sent < self.spec.max_requests)

    def count(self, delta: int) -> None:
        now = time.perf_counter() - self.t0
        if self.sending:
            self.area += self.in_flight * (now - self.last_change)
            self.last_change = now
        self.in_flight += delta

    def end_sending(self) -> float:
        """Closes the sending window now (the in-flight integral stops there); returns its length in seconds."""
        self.count(0)
        self.sending = False
        return time.perf_counter() - self.t0

    async def tracked(self, key: str) -> None:
        kind, question = _question(self.rng, self.spec)
        self.count(+1)
        try:
            outcome = await _one(self.client, self.spec, key, kind, question, self.t0)
        finally:
            self.count(-1)
        self.outcomes.append(outcome)
        if self.progress is not None:
            self.progress(outcome)

    async def send_poisson(self) -> list[asyncio.Task]:
        """Open loop: starts a request at each Poisson arrival until sending stops; returns their tasks."""
        spec = self.spec
        tasks: list[asyncio.Task] = []
        next_at = self.t0
        while True:
            # absolute arrival times: time spent sending does not slow the Poisson process down
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            if not self.may_send():
                break
            tasks.append(asyncio.create_task(self.tracked(spec.api_keys[self.sent % len(spec.api_keys)])))
            self.sent += 1
            next_at += self.rng.expovariate(spec.rate)
        return tasks

    async def client_loop(self, i: int) -> None:
        """Closed loop: client i sends its next request when its last one ends, until sending stops."""
        while self.may_send():
            self.sent += 1
            await self.tracked(self.spec.api_keys[i % len(self.spec.api_keys)])


async def _drive(load: _LoadRun) -> float:
    """Send one load's requests until its window closes, then await them; returns the window in seconds."""
    if load.spec.rate is not None:
        tasks = await load.send_poisson()
    else:
        tasks = [asyncio.create_task(load.client_loop(i)) for i in range(int(load.spec.concurrency or 1))]
        await asyncio.wait(tasks, timeout=max(load.stop_at - time.perf_counter(), 0.0))
    window = load.end_sending()  # the last arrival (or the duration)
    load.in_flight_at_close = load.in_flight
    await asyncio.gather(*tasks)
    return window


def _tenant_spec(spec: LoadSpec, tenant: TenantLoad, i: int) -> LoadSpec:
    return replace(spec, api_keys=(tenant.api_key,), rate=tenant.rate, concurrency=tenant.concurrency,
                   questions=tenant.questions or spec.questions, seed=spec.seed + 1000 * (i + 1), tenants=())


async def run_load(spec: LoadSpec, progress: Callable[[Outcome], None] | None = None) -> dict[str, Any]:
    import httpx

    spec.check()
    specs = [_tenant_spec(spec, t, i) for i, t in enumerate(spec.tenants)] or [spec]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(base_url=spec.url.rstrip("/"), timeout=httpx.Timeout(spec.timeout_s), limits=limits) as client:
        loads = [_LoadRun(s, client, random.Random(s.seed), t0, progress) for s in specs]
        windows = await asyncio.gather(*(_drive(load) for load in loads))
    elapsed = time.perf_counter() - t0
    parts = [summarize(s, load.outcomes, load.sent, w, elapsed, load.area / w if w > 0 else 0.0, load.in_flight_at_close)
             for s, load, w in zip(specs, loads, windows)]
    if not spec.tenants:
        return parts[0]
    window = max(windows)
    report = summarize(spec, [o for load in loads for o in load.outcomes], sum(load.sent for load in loads), window, elapsed,
                       sum(load.area for load in loads) / window if window > 0 else 0.0, sum(load.in_flight_at_close for load in loads))
    report["tenants"] = {t.name: {k: v for k, v in part.items() if k != "requests"} | {"weight": t.weight}
                         for t, part in zip(spec.tenants, parts)}
    served = [(p["tokens_in_total"] + p["tokens_out_total"]) / t.weight for t, p in zip(spec.tenants, parts)]
    report["jain_index"] = jain_index(served)
    return report


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one gets everything."""
    squares = sum(v * v for v in values)
    return sum(values) ** 2 / (len(values) * squares) if squares > 0 else None


def _cost_by_tenant(answered: Sequence[Outcome]) -> dict[str, dict[str, float]]:
    """Requests, tokens and cost (spent and saved by caches) summed per tenant ("-" for requests without one)."""
    by_tenant: dict[str, dict[str, float]] = {}
    for o in answered:
        t = by_tenant.setdefault(o.tenant or "-", {"requests": 0, "tokens_in": 0, "tokens_out": 0, "saved_tokens": 0,
                                                   "cost": 0.0, "saved_cost": 0.0})
        t["requests"] += 1
        t["tokens_in"] += o.tokens_in
        t["tokens_out"] += o.tokens_out
        t["saved_tokens"] += o.saved_tokens
        t["cost"] += o.cost
        t["saved_cost"] += o.saved_cost
    return by_tenant


def summarize(spec: LoadSpec, outcomes: Sequence[Outcome], sent: int, send_window: float, elapsed: float,
              measured_in_flight: float, in_flight_at_close: int = 0) -> dict[str, Any]:
    """The load test's report: counts, rates, latency percentiles of the answered requests, tokens, cost and
    Little's law (measured in-flight against arrival rate x mean latency), with every request."""
    counts = {s: sum(o.status == s for o in outcomes) for s in ("ok", "rate_limited", "refused", "timed_out", "error")}
    answered = [o for o in outcomes if o.status == "ok"]
    n = max(len(outcomes), 1)
    arrival_rate = sent / send_window if send_window > 0 else 0.0
    mean_latency_s = sum(o.latency_ms for o in outcomes) / 1000 / n if outcomes else 0.0
    predicted = arrival_rate * mean_latency_s
    measured = measured_in_flight
    errors = [o.error for o in outcomes if o.status == "error" and o.error]
    return {
        "url": spec.url,
        "mode": "tenants" if spec.tenants else "poisson" if spec.rate is not None else "closed_loop",
        "rate": spec.rate,
        "concurrency": spec.concurrency,
        "duration_s": spec.duration_s,
        "elapsed_s": elapsed,
        "sent": sent,
        "ok": counts["ok"],
        "rate_limited": counts["rate_limited"],
        "refused": counts["refused"],
        "timed_out": counts["timed_out"],
        "errors": counts["error"],
        "lost": sent - len(outcomes),
        "achieved_qps": counts["ok"] / elapsed if elapsed else 0.0,
        "offered_qps": arrival_rate,
        "error_rate": counts["error"] / n,
        "timeout_rate": counts["timed_out"] / n,
        "rate_limited_rate": counts["rate_limited"] / n,
        "refused_rate": counts["refused"] / n,
        "latency_ms": percentiles(o.latency_ms for o in answered),
        "ttft_ms": percentiles(o.ttft_ms for o in answered if o.ttft_ms is not None),
        "server_ttft_ms": percentiles(o.server_ttft_ms for o in answered if o.server_ttft_ms is not None),
        "tpot_ms": percentiles(o.tpot_ms for o in answered if o.tpot_ms is not None),
        "queue_ms": percentiles(o.queue_ms for o in answered if o.queue_ms is not None),
        "by_kind": {k: {"sent": sum(o.kind == k for o in outcomes),
                        "latency_ms": percentiles(o.latency_ms for o in answered if o.kind == k)} for k in ("short", "long")},
        "cache_hit_rate": sum(o.cache_hit for o in answered) / len(answered) if answered else 0.0,
        "tokens_in_total": sum(o.tokens_in for o in answered),
        "tokens_out_total": sum(o.tokens_out for o in answered),
        "tokens_per_s": sum(o.tokens_in + o.tokens_out for o in answered) / elapsed if elapsed else 0.0,
        "output_tokens_per_s": sum(o.tokens_out for o in answered) / elapsed if elapsed else 0.0,
        "tokens_per_request": {"in": sum(o.tokens_in for o in answered) / max(len(answered), 1),
                               "out": sum(o.tokens_out for o in answered) / max(len(answered), 1)},
        "cost_per_request": sum(o.cost for o in answered) / max(len(answered), 1),
        "cost_by_tenant": _cost_by_tenant(answered),
        "littles_law": {"arrival_rate": arrival_rate, "mean_latency_s": mean_latency_s, "predicted_in_flight": predicted,
                        "measured_in_flight": measured, "ratio": measured / predicted if predicted else None,
                        "window_s": send_window, "in_flight_at_close": in_flight_at_close},
        "error_examples": sorted(set(errors))[:5],
        "requests": [asdict(o) | {"latency_ms": o.latency_ms} for o in outcomes],
    }


def run(spec: LoadSpec, progress_bar: bool = True) -> dict[str, Any]:
    """Run the load test (blocking), with progress on stderr counting finished requests (ragopt.progress)."""
    from ragopt.progress import progress_bar as bar_for

    total = spec.max_requests or (int(spec.rate * spec.duration_s) if spec.rate else None)
    with bar_for(total=total, desc="requests", unit="req", disable=not progress_bar, leave=False) as bar:

        def tick(o: Outcome) -> None:
            bar.update(1)
            bar.set_postfix_str(f"last {o.status} {o.latency_ms:.0f} ms", refresh=False)

        return asyncio.run(run_load(spec, tick))
