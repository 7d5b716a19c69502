"""Guards: token buckets (local and shared in Redis), daily quota, circuit breaker states, fallback chain,
per-stage deadline (the routing rule: tests/text/test_routing.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ragopt.errors import BreakerOpen, QueueTimeout
from ragopt.pipeline import Pipeline, RequestState, Step
from ragopt.serve.guards import (
    CircuitBreaker,
    DailyQuota,
    FallbackChain,
    Guarded,
    PromptGate,
    RateLimiter,
    SkipWhenAnswered,
    StageDeadline,
)
from ragopt.stages.generate_extractive import ExtractiveGenerator
from ragopt.types import Answer, Query


class Flaky:
    """A generator whose failures are injected on purpose: it raises while `broken` is set."""

    name = "generate"
    reads = ("query", "hits")
    writes = ("answer",)

    def __init__(self) -> None:
        self.broken = False
        self.calls = 0

    def run(self, state: RequestState) -> RequestState:
        self.calls += 1
        if self.broken:
            raise ConnectionError("backend down")
        state.answer = Answer(text="primary", generator="flaky")
        return state


def _redis(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, decode_responses=True)


def test_local_bucket_allows_the_burst_then_refuses_with_retry_after() -> None:
    limiter = RateLimiter(rate_per_s=2.0, burst=3)
    assert [limiter.take("k")[0] for _ in range(3)] == [True, True, True]
    ok, retry = limiter.take("k")
    assert not ok and 0 < retry <= 0.5
    assert limiter.take("other")[0]  # buckets are per name


def test_redis_buckets_are_shared_between_limiters(fresh_redis: str) -> None:
    """Two serve processes = two limiters on one Redis: they draw from the same bucket."""
    a = RateLimiter(rate_per_s=0.5, burst=4, redis_client=_redis(fresh_redis))
    b = RateLimiter(rate_per_s=0.5, burst=4, redis_client=_redis(fresh_redis))
    taken = [a.take("key:x")[0], b.take("key:x")[0], a.take("key:x")[0], b.take("key:x")[0]]
    assert taken == [True] * 4
    ok, retry = b.take("key:x")
    assert not ok and 0 < retry <= 2.0
    assert a.take("key:y")[0]


@pytest.mark.parametrize("backend", ["local", "redis"])
def test_daily_quota_counts_tokens_per_tenant(backend: str, request: pytest.FixtureRequest) -> None:
    client = _redis(request.getfixturevalue("fresh_redis")) if backend == "redis" else None
    quota = DailyQuota(100, client)
    quota.spend("acme", 60)
    assert not quota.exceeded("acme")
    quota.spend("acme", 40)
    assert quota.exceeded("acme") and not quota.exceeded("beta")
    assert 0 < quota.seconds_to_midnight() <= 86400


def test_breaker_opens_after_failures_then_half_opens_and_closes_on_success() -> None:
    flaky = Flaky()
    breaker = CircuitBreaker("llm", failures=2, reset_s=0.2)
    pipe = Pipeline([Step(Guarded(flaky, breaker), fallback=ExtractiveGenerator())], inputs=("query", "hits"))
    flaky.broken = True
    for _ in range(2):
        result = pipe.run("q")
        assert result.answer.generator == "extractive" and result.trace.degraded
    assert breaker.state == "open"
    calls = flaky.calls
    result = pipe.run("q")  # open: refused without calling the backend
    assert flaky.calls == calls and "BreakerOpen" in result.trace.degraded[0]
    time.sleep(0.3)
    flaky.broken = False
    result = pipe.run("q")  # the half-open trial succeeds
    assert result.answer.text == "primary" and breaker.state == "closed"
    assert breaker.transitions == ["closed->open", "open->half_open", "half_open->closed"]


def test_a_refusal_under_load_never_opens_the_breaker_nor_holds_its_trial() -> None:
    class Busy(Flaky):
        def run(self, state: RequestState) -> RequestState:
            self.calls += 1
            raise QueueTimeout("model busy")  # an injected fault: load, not a broken backend

    breaker = CircuitBreaker("llm", failures=2, reset_s=0.1)
    pipe = Pipeline([Step(Guarded(Busy(), breaker), fallback=ExtractiveGenerator())], inputs=("query", "hits"))
    for _ in range(5):
        assert "QueueTimeout" in pipe.run("q").trace.degraded[0]
    assert breaker.state == "closed" and breaker.consecutive_failures == 0
    breaker.failure()
    breaker.failure()  # opened by real failures
    time.sleep(0.15)
    assert "QueueTimeout" in pipe.run("q").trace.degraded[0]  # the half-open trial was refused under load...
    assert breaker.state == "half_open" and breaker.allow()  # ...so the next call may take the trial again


def test_a_failed_half_open_trial_opens_the_breaker_again() -> None:
    breaker = CircuitBreaker("llm", failures=1, reset_s=0.1)
    breaker.failure()
    time.sleep(0.15)
    assert breaker.allow() and not breaker.allow()  # one trial at a time
    breaker.failure()
    assert breaker.state == "open" and not breaker.allow()


class FlakyPrompt:
    """A prompt stage with a remote tokenizer: it raises while `broken` is set."""

    name = "prompt"
    reads = ("query", "hits")
    writes = ("prompt",)

    def __init__(self) -> None:
        self.broken = False

    def run(self, state: RequestState) -> RequestState:
        if self.broken:
            raise ConnectionError("tokenizer unreachable")
        state.prompt = "fitted"
        return state


def test_a_prompt_stage_counts_against_its_backend_and_fails_over_once() -> None:
    """The prompt stage's failure answers from the fallback, counts one failure, and the generator is not
    called (nor counted); while the breaker is open the prompt stage is refused; its success alone closes nothing."""
    prompt, flaky = FlakyPrompt(), Flaky()
    flaky.reads = ("query", "prompt")
    breaker = CircuitBreaker("llm", failures=2, reset_s=60)
    pipe = Pipeline([Step(PromptGate(prompt, breaker), fallback=ExtractiveGenerator()),
                     Step(SkipWhenAnswered(Guarded(flaky, breaker)), fallback=ExtractiveGenerator())], inputs=("query", "hits"))
    prompt.broken = True
    result = pipe.run("q")
    assert result.answer.generator == "extractive" and flaky.calls == 0
    assert breaker.consecutive_failures == 1 and breaker.state == "closed"
    pipe.run("q")
    assert breaker.state == "open"
    prompt.broken = False
    result = pipe.run("q")
    assert "BreakerOpen" in result.trace.degraded[0] and flaky.calls == 0
    closed = CircuitBreaker("llm", failures=2, reset_s=60)
    closed.failure()
    PromptGate(prompt, closed).run(RequestState(query=Query(text="q")))
    assert closed.consecutive_failures == 1  # a prompt that fits says nothing of the generator


def test_fallback_chain_uses_the_next_stage_and_says_why() -> None:
    small = Flaky()
    small.broken = True
    chain = FallbackChain([small, ExtractiveGenerator()])
    state = RequestState(query=Query(text="q"))
    state = chain.run(state)
    assert state.answer.generator == "extractive"
    assert state.usage.attrs["fallback_used"] == "extractive"
    assert "backend down" in state.usage.attrs["fallback_errors"][0]
    with pytest.raises(BreakerOpen):
        FallbackChain([Guarded(Flaky(), _open_breaker())]).run(RequestState(query=Query(text="q")))


def _open_breaker() -> CircuitBreaker:
    b = CircuitBreaker("x", failures=1, reset_s=60)
    b.failure()
    return b


def test_stage_deadline_tightens_then_restores_the_request_deadline() -> None:
    seen: list[float | None] = []

    class Probe:
        name, reads, writes = "probe", ("query",), ("answer",)

        def run(self, state: RequestState) -> RequestState:
            seen.append(state.remaining_s())
            return state

    state = RequestState(query=Query(text="q"), deadline=time.monotonic() + 100)
    StageDeadline(Probe(), 0.5).run(state)
    assert seen[0] is not None and seen[0] <= 0.5
    assert state.remaining_s() > 50
