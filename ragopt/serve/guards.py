"""Guards of the service: rate limits and quotas, circuit breakers, per-stage deadlines, a fallback chain
(which model answers a question is ragopt.text.routing's rule).

- `RateLimiter`: one token bucket per key ("key:<api key>", "tenant:<tenant>"), in process memory or in
  Redis (a Lua script makes the refill-and-take atomic, so several serve processes share the buckets).
  A refusal says how long until a token is back (the 429's Retry-After).
- `DailyQuota`: model tokens per tenant per UTC day (local dict or Redis INCRBY with expiry).
- `CircuitBreaker` (ragopt.backends.breaker) + `Guarded`: a stage that fails `failures` times in a row opens its breaker; while open,
  calls fail at once (the pipeline's fallback answers); after `reset_s` one trial call is let through
  (half-open): success closes the breaker, failure opens it again.
- `FallbackChain`: the next stages to try when the primary generator fails (a smaller model, then the
  extractive answer); the pipeline marks the answer degraded.
- `StageDeadline`: a stage gets at most `seconds` of the request's remaining time.
Who gets a generation slot, and when, is `ragopt.serve.scheduler`'s job.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from ragopt.backends.breaker import CircuitBreaker
from ragopt.errors import BadRequest, BreakerOpen, Refused
from ragopt.pipeline import RequestState

# KEYS[1] bucket; ARGV: rate/s, burst, now (s), cost. Returns {allowed 0/1, retry_after ms}.
_BUCKET_LUA = """
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local rate, burst, now, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local allowed, wait = 0, 0
if tokens >= cost then tokens = tokens - cost; allowed = 1 else wait = math.ceil((cost - tokens) / rate * 1000) end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {allowed, wait}
"""


class RateLimiter:
    """Token buckets: `rate_per_s` refill, `burst` capacity. `take(name)` -> (allowed, retry_after_s). `clock`
    gives seconds (default: wall time with Redis, shared by processes; else monotonic)."""

    def __init__(self, rate_per_s: float, burst: float, redis_client: Any = None, prefix: str = "ragopt:bucket:",
                 clock: Callable[[], float] | None = None):
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a bucket needs rate > 0 and burst >= 1")
        self.rate = rate_per_s
        self.burst = burst
        self.redis = redis_client
        self.prefix = prefix
        self._script = redis_client.register_script(_BUCKET_LUA) if redis_client is not None else None
        self.clock = clock or (time.time if redis_client is not None else time.monotonic)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, name: str, cost: float = 1.0) -> tuple[bool, float]:
        if self._script is not None:
            allowed, wait_ms = self._script(keys=[self.prefix + name], args=[self.rate, self.burst, self.clock(), cost])
            return bool(allowed), int(wait_ms) / 1000
        with self._lock:
            now = self.clock()
            tokens, ts = self._buckets.get(name, (self.burst, now))
            tokens = min(self.burst, tokens + (now - ts) * self.rate)
            if tokens >= cost:
                self._buckets[name] = (tokens - cost, now)
                return True, 0.0
            self._buckets[name] = (tokens, now)
            return False, (cost - tokens) / self.rate


class DailyQuota:
    """Model tokens per tenant per UTC day. `exceeded(tenant)` before a request, `spend(tenant, n)` after."""

    def __init__(self, tokens_per_day: int, redis_client: Any = None, prefix: str = "ragopt:quota:"):
        self.limit = tokens_per_day
        self.redis = redis_client
        self.prefix = prefix
        self._used: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _day() -> str:
        return datetime.now(timezone.utc).strftime("%Y-%m-%d")

    @staticmethod
    def seconds_to_midnight() -> float:
        now = datetime.now(timezone.utc)
        return 86400 - (now.hour * 3600 + now.minute * 60 + now.second)

    def used(self, tenant: str) -> int:
        if self.redis is not None:
            return int(self.redis.get(f"{self.prefix}{tenant}:{self._day()}") or 0)
        return self._used.get((tenant, self._day()), 0)

    def exceeded(self, tenant: str) -> bool:
        return self.used(tenant) >= self.limit

    def spend(self, tenant: str, tokens: int) -> None:
        if tokens <= 0:
            return
        if self.redis is not None:
            key = f"{self.prefix}{tenant}:{self._day()}"
            pipe = self.redis.pipeline()
            pipe.incrby(key, tokens)
            pipe.expire(key, 2 * 86400)
            pipe.execute()
            return
        with self._lock:
            k = (tenant, self._day())
            self._used[k] = self._used.get(k, 0) + tokens


class _StandIn:
    """A wrapper that takes its stage's place: the same name, fields and config, and its warm-up."""

    def __init__(self, stage: Any):
        self.stage = stage
        self.name, self.reads, self.writes = stage.name, stage.reads, stage.writes
        self.config = getattr(stage, "config", None)
        warm = getattr(stage, "warm", None)
        if warm is not None:
            self.warm = warm


class Guarded(_StandIn):
    """A stage behind a circuit breaker, with the same name and fields. A cancelled or timed-out request
    (finish_reason "deadline") says nothing about the backend's health and does not count either way, nor does a
    refusal under load (a busy or overloaded model, a request over the KV budget)."""

    def __init__(self, stage: Any, breaker: CircuitBreaker):
        super().__init__(stage)
        self.breaker = breaker

    def run(self, state: RequestState) -> RequestState:
        if not self.breaker.allow():
            raise BreakerOpen(f"circuit breaker {self.breaker.name!r} is open")
        try:
            state = self.stage.run(state)
        except (Refused, BadRequest):
            self.breaker.neutral()
            raise
        except Exception:  # any other failure of the backend, in process or remote, counts against it
            self.breaker.failure()
            raise
        self.breaker.success()
        return state


class PromptGate(_StandIn):
    """A backend's prompt stage behind that backend's breaker. A remote tokenizer is part of the backend: while
    the breaker is open the stage is refused, and its failure counts against the backend. Its success closes
    nothing: whether the backend answers is the generator's call (Guarded), which takes the half-open trial."""

    def __init__(self, stage: Any, breaker: CircuitBreaker):
        super().__init__(stage)
        self.breaker = breaker

    def run(self, state: RequestState) -> RequestState:
        if self.breaker.refusing():
            raise BreakerOpen(f"circuit breaker {self.breaker.name!r} is open")
        try:
            return self.stage.run(state)
        except (Refused, BadRequest):  # load, or a request no backend can honour: says nothing of this one's health
            raise
        except Exception:  # any other failure of the backend's tokenizer counts against it
            self.breaker.failure()
            raise


class SkipWhenAnswered(_StandIn):
    """A generator after a PromptGate: when the prompt stage failed over, the fallback has answered already."""

    def run(self, state: RequestState) -> RequestState:
        return state if state.answer is not None else self.stage.run(state)


class FallbackChain:
    """Tries each stage in turn until one answers; `usage.attrs["fallback_used"]` names it and
    `fallback_errors` lists why the earlier ones did not."""

    def __init__(self, stages: Sequence[Any], name: str = "fallback"):
        if not stages:
            raise ValueError("a fallback chain needs at least one stage")
        self.stages = list(stages)
        self.name = name
        self.reads = tuple(dict.fromkeys(r for s in self.stages for r in s.reads))
        self.writes = tuple(dict.fromkeys(w for s in self.stages for w in s.writes))

    def run(self, state: RequestState) -> RequestState:
        errors = []
        for i, stage in enumerate(self.stages):
            try:
                state = stage.run(state)
            except Exception as exc:
                if i == len(self.stages) - 1 or isinstance(exc, BadRequest):
                    raise
                errors.append(f"{stage.name}: {type(exc).__name__}: {exc}")
                restart = getattr(state.on_token, "restart", None)  # the next answers anew (ragopt.pipeline.AnswerStream)
                if restart is not None:
                    restart()
                continue
            state.usage.attrs.update({"fallback_used": stage.name, "fallback_errors": errors})
            return state
        raise AssertionError("unreachable")


class StageDeadline:
    """Runs `stage` with the request's deadline tightened to at most `seconds` from now, then restores it."""

    def __init__(self, stage: Any, seconds: float):
        self.stage = stage
        self.seconds = seconds
        self.name = stage.name
        self.reads = stage.reads
        self.writes = stage.writes
        self.config = getattr(stage, "config", None)

    def run(self, state: RequestState) -> RequestState:
        outer = state.deadline
        mine = time.monotonic() + self.seconds
        state.deadline = mine if outer is None else min(outer, mine)
        try:
            return self.stage.run(state)
        finally:
            if state.deadline == min(mine, outer if outer is not None else mine):
                state.deadline = outer  # unless a cancel moved it to "now" during the stage: that stays
