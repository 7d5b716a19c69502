"""The scheduler's order, on its own (no model): the least weighted service first with no credit after idle,
weights, caps, priorities with reserved slots, aging, deadlines refused before a slot, cancels, and fifo."""

from __future__ import annotations

import json
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from fixtures.serving import running_service, served_plan
from fixtures.tiny_corpus import write_beir

from ragopt import capacity
from ragopt.errors import SlotRefused
from ragopt.serve.scheduler import KeyPolicy, Scheduler, TenantPolicy, Ticket, slot_limit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ticket(tenant: str, key: str | None = None, deadline: float | None = None, weight: float = 1.0, **policy: int) -> Ticket:
    return Ticket(tenant, key or tenant, KeyPolicy(**policy), TenantPolicy(weight=weight), deadline=deadline)


def serve_in_turn(sched: Scheduler, clock: Clock, tokens: int = 100, steps: int | None = None) -> list[str]:
    """Release the running tickets one by one (each used `tokens` tokens, 1 s): the tenants in service order."""
    order: list[str] = []
    running = [t for t in list(sched._started) if t.started is not None]
    while running and (steps is None or len(order) < steps):
        first = min(running, key=lambda t: t.started)  # type: ignore[arg-type,return-value]
        order.append(first.key_id)
        clock.now += 1.0
        sched.release(first, tokens, 0)
        running = [t for t in sched._started if t.started is not None]
    return order


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(clock: Clock, limit: int = 1, **kw: object) -> Scheduler:
    sched = Scheduler(limit, clock=clock, **kw)  # type: ignore[arg-type]
    sched._started = []  # type: ignore[attr-defined]
    original = sched.submit

    def submit(t: Ticket) -> None:
        sched._started.append(t)  # type: ignore[attr-defined]
        original(t)

    sched.submit = submit  # type: ignore[method-assign]
    return sched


def test_the_free_slot_goes_to_the_tenant_with_the_least_service(clock: Clock) -> None:
    sched = make(clock)
    for _ in range(6):
        sched.submit(ticket("flood"))
    assert serve_in_turn(sched, clock, steps=3) == ["flood"] * 3  # alone, the flood is served
    sched.submit(ticket("quiet"))
    sched.submit(ticket("quiet"))
    # quiet comes back lifted to the flood's counter (no credit for its idle time): the two alternate
    assert serve_in_turn(sched, clock) == ["flood", "quiet", "flood", "quiet", "flood"]


def test_a_returning_tenant_waits_for_the_request_in_service_only_when_its_input_was_overestimated(clock: Clock) -> None:
    sched = make(clock)
    for _ in range(3):  # recent prompts of 100 tokens: the next grant is charged 100 input tokens in advance
        sched.submit(ticket("flood"))
    serve_in_turn(sched, clock, tokens=100, steps=3)
    for _ in range(3):
        sched.submit(ticket("flood"))
    quiet = ticket("quiet")
    sched.submit(quiet)  # lifted to the flood's service without the running request's guess
    running = next(t for t in sched._started if t.started is not None)
    sched.release(running, 40, 0)  # its prompt had 40 tokens: the flood's counter is settled 60 lower
    assert quiet.started is not None  # still the quiet tenant's turn, not a second flood request first


def test_a_returning_tenant_gets_no_burst_of_credit(clock: Clock) -> None:
    sched = make(clock)
    for _ in range(4):
        sched.submit(ticket("a"))
    serve_in_turn(sched, clock, steps=3)  # a has 300 tokens of service, b none
    for _ in range(3):
        sched.submit(ticket("b"))
    sched.submit(ticket("a"))
    order = serve_in_turn(sched, clock)
    # without the lift b would take its three turns in a row (0 < 300 tokens)
    assert order[:5] == ["a", "b", "a", "b", "b"]


def test_weights_share_the_slots(clock: Clock) -> None:
    sched = make(clock)
    for _ in range(12):
        sched.submit(ticket("heavy", weight=2.0))
        sched.submit(ticket("light", weight=1.0))
    order = serve_in_turn(sched, clock, steps=12)
    assert order.count("heavy") == 8 and order.count("light") == 4


def test_key_and_tenant_caps(clock: Clock) -> None:
    sched = make(clock, limit=3)
    for _ in range(3):
        sched.submit(ticket("acme", "k1", max_concurrency=1))
    sched.submit(ticket("beta"))
    running = sorted(t.key_id for t in sched._started if t.started is not None)
    assert running == ["beta", "k1"]  # a free slot stays free rather than break k1's cap of 1
    sched2 = make(clock, limit=3)
    for key in ("k1", "k2", "k3"):
        sched2.submit(Ticket("acme", key, KeyPolicy(), TenantPolicy(max_concurrency=2), deadline=None))
    assert sched2.running == 2 and sched2.waiting == 1  # the tenant's cap spans its keys


def test_reserved_slots_keep_capacity_for_a_privileged_key_under_a_flood(clock: Clock) -> None:
    sched = make(clock, limit=4)
    sched.register("ops", "admin", KeyPolicy(priority=1, reserved_slots=1), TenantPolicy())
    for _ in range(10):
        sched.submit(ticket("flood"))
    assert sched.running == 3  # the fourth slot is held for the admin key
    admin = ticket("ops", "admin", priority=1, reserved_slots=1)
    sched.submit(admin)
    assert admin.started is not None
    second = ticket("ops", "admin", priority=1, reserved_slots=1)
    sched.submit(second)
    assert second.started is None
    flood_running = [t for t in sched._started if t.started is not None and t.tenant == "flood"]
    sched.release(flood_running[0], 10, 10)
    assert second.started is not None  # the higher class takes the next free slot, ahead of 7 older ones


def test_serial_prefill_grants_the_next_slot_once_the_last_granted_has_its_first_token(clock: Clock) -> None:
    sched = make(clock, limit=3, serial_prefill=True)
    a, b, c = ticket("flood"), ticket("quiet"), ticket("flood")
    for t in (a, b, c):
        sched.submit(t)
    assert [t.started is not None for t in (a, b, c)] == [True, False, False]  # free slots wait for a's first token
    sched.charge(a, 1)
    assert b.started is not None and c.started is None  # the next grant goes by the usual order (quiet's turn)
    sched.release(b, 10, 0)  # b failed before its first token: its prefill is over too
    assert c.started is not None
    sched.charge(c, 1)
    assert sched.prefilling == 0 and sched.running == 2
    concurrent = make(clock, limit=3)  # without the setting, free slots are granted at once
    for t in (ticket("flood"), ticket("quiet"), ticket("flood")):
        concurrent.submit(t)
    assert concurrent.running == 3


def test_aging_lifts_a_waiting_request_to_the_privileged_class(clock: Clock) -> None:
    sched = make(clock, aging_s=10.0)
    for _ in range(8):
        sched.submit(ticket("ops", "admin", priority=1))
    low = ticket("plain")
    sched.submit(low)
    order = serve_in_turn(sched, clock, steps=5)
    assert "plain" not in order[:2]  # fresh, it is below the privileged class
    clock.now += 10.0
    assert "plain" in serve_in_turn(sched, clock, steps=3)  # waited 10 s more: now level with it, and less served


def test_a_deadline_that_cannot_be_met_is_refused_before_a_slot(clock: Clock) -> None:
    sched = make(clock)
    first = ticket("a")
    sched.submit(first)
    clock.now += 4.0
    sched.release(first, 100, 50)  # the fastest recent service: 4 s
    with pytest.raises(SlotRefused) as refused:
        sched.submit(ticket("a", deadline=clock.now + 3.0))
    assert refused.value.status == 503 and refused.value.retry_after_s >= 1 and sched.refused == {"deadline": 1}
    assert sched.running == 0 and sched.waiting == 0


def test_a_waiting_request_is_refused_when_its_deadline_comes_too_close() -> None:
    sched = Scheduler(1, queue_timeout_s=30)
    hold = ticket("a")
    sched.acquire(hold)
    sched._recent.append(0.3)  # the fastest answer took 0.3 s
    t0 = time.monotonic()
    with pytest.raises(SlotRefused) as refused:
        sched.acquire(ticket("b", deadline=t0 + 0.5))
    waited = time.monotonic() - t0
    assert refused.value.status == 503 and 0.15 <= waited < 0.4  # at deadline - 0.3 s, not at the deadline
    assert sched.waiting == 0 and sched.running == 1


def test_a_cancelled_waiter_leaves_the_queue_at_once() -> None:
    sched = Scheduler(1)
    sched.acquire(ticket("a"))
    waiter = ticket("b")
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catch(lambda: sched.acquire(waiter), errors))
    thread.start()
    while sched.waiting == 0:
        time.sleep(0.01)
    t0 = time.monotonic()
    sched.cancel(waiter)
    thread.join(2)
    assert time.monotonic() - t0 < 0.5 and sched.waiting == 0
    assert isinstance(errors[0], SlotRefused) and errors[0].reason == "cancelled"


def _catch(fn: object, errors: list[BaseException]) -> None:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001 - handed to the test
        errors.append(exc)


def test_fifo_serves_in_arrival_order(clock: Clock) -> None:
    sched = make(clock, policy="fifo")
    for tenant in ["flood"] * 4 + ["quiet"]:
        sched.submit(ticket(tenant))
    assert serve_in_turn(sched, clock) == ["flood"] * 4 + ["quiet"]


def test_a_full_queue_is_refused_with_429(clock: Clock) -> None:
    sched = make(clock, max_queue=1)
    sched.submit(ticket("a"))
    sched.submit(ticket("a"))
    with pytest.raises(SlotRefused) as refused:
        sched.submit(ticket("b"))
    assert refused.value.status == 429 and refused.value.reason == "queue_full"


def test_the_slot_limit_comes_from_kv_arithmetic_and_slots() -> None:
    per_seq = capacity.kv_bytes(capacity.ModelShape(n_layer=30, n_head_kv=3, head_dim=64), 2048)
    assert slot_limit(8, 2.5 * per_seq, per_seq) == 2  # 2.5 sequences of KV fit 2, fewer than the 8 slots
    assert slot_limit(3) == 3
    sched = Scheduler(slot_limit(8, 0.5 * per_seq, per_seq))
    with pytest.raises(SlotRefused, match="KV budget"):
        sched.submit(ticket("a"))


# --- through the HTTP app, on real llama.cpp (the tiny GGUF) -------------------------------------------------

STAFF = {"Authorization": "Bearer key-acme-staff"}
BETA = {"Authorization": "Bearer key-beta"}


def _long_opts(tiny_gguf: Path, dataset: Path) -> Any:
    """max_tokens 3000 and no repetition stop: the random tiny model streams far longer than any test waits."""
    from ragopt.serve.build import ServeOptions
    from ragopt.serve.service import ServeSettings

    plan = served_plan(model=str(tiny_gguf), n_ctx=4096, max_tokens=3000, repeat_stop=0)
    return ServeOptions(settings=ServeSettings(), plan=plan, dataset=str(dataset))


@contextmanager
def _holding_the_slot(url: str) -> Iterator[None]:
    """A long streamed answer of tenant acme holds the only slot while the block runs; its client then leaves."""
    import httpx

    body = {"question": "Tell me about glaciers", "stream": True, "realtime": True}
    with httpx.stream("POST", f"{url}/v1/ask", json=body, headers=STAFF, timeout=60) as r:
        lines = r.iter_lines()
        assert any(line.startswith("event: token") for line in lines)
        yield


def _wait_for(condition: Callable[[], bool], limit_s: float) -> float:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < limit_s, "condition not reached in time"
        time.sleep(0.02)
    return time.monotonic() - t0


def test_a_deadline_that_cannot_be_met_is_refused_before_prefill(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    import httpx

    with running_service(_long_opts(tiny_gguf, serve_files["dataset"]), tmp_path, serve_files["keys"]) as (url, service):
        service.scheduler._recent.append(1.0)  # the fastest recent answer took 1 s
        with _holding_the_slot(url):
            r = httpx.post(f"{url}/v1/ask", json={"question": "What causes tides?", "deadline_s": 3.0, "realtime": True},
                           headers=BETA, timeout=30)
            assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1, r.text
            assert r.json()["error"]["type"] == "service_unavailable_error" and r.json()["error"]["code"] == "deadline"
            left = float(re.search(r"cannot be met: ([0-9.]+) s left", r.json()["error"]["message"]).group(1))  # type: ignore[union-attr]
            assert left >= 0.5  # refused once less than 1 s was left (about 1 s before the deadline), not when it passed
            r = httpx.post(f"{url}/v1/ask", json={"question": "What causes tides?", "deadline_s": 0.5}, headers=BETA, timeout=30)
            assert r.status_code == 503  # at arrival: 0.5 s is less than any answer takes
        assert service.metrics.tokens_in.labels(tenant="beta")._value.get() == 0  # beta's prompts were never evaluated
        metrics = httpx.get(f"{url}/metrics").text
        assert 'ragopt_scheduler_refused_total{reason="deadline"} 2.0' in metrics
        assert 'ragopt_rate_limited_total{reason="deadline"} 2.0' in metrics


@pytest.mark.parametrize("stream", [True, False])
def test_a_disconnected_client_frees_its_slot_within_a_second(stream: bool, tiny_gguf: Path, serve_files: dict[str, Path],
                                                              tmp_path: Path) -> None:
    import httpx

    with running_service(_long_opts(tiny_gguf, serve_files["dataset"]), tmp_path, serve_files["keys"]) as (url, service):
        body = {"question": "Tell me about glaciers", "stream": stream, "realtime": True}
        if stream:
            with _holding_the_slot(url):
                assert service.scheduler.running == 1
            left = time.monotonic()
        else:
            with pytest.raises(httpx.ReadTimeout):  # the client gives up after 1.5 s and closes its connection
                httpx.post(f"{url}/v1/ask", json=body, headers=STAFF, timeout=1.5)
            left = time.monotonic()
        _wait_for(lambda: service.scheduler.running == 0, 5.0)
        freed = time.monotonic() - left
        assert freed < 1.0, freed
        out = httpx.post(f"{url}/v1/ask", json={"question": "What causes tides?", "deadline_s": 2}, headers=BETA, timeout=60)
        assert out.status_code == 200 and out.json()["trace"]["tokens_out"] > 0  # the slot serves the next request
        assert service.metrics.requests.labels(endpoint="/v1/ask", outcome="cancelled")._value.get() == 1


KEY_FILE_BAD_VALUES = {
    "weight": ({"k": {"tenant": "a", "weight": 0}}, "weight"),
    "max_concurrency": ({"k": {"tenant": "a", "max_concurrency": 0}}, "max_concurrency"),
    "priority": ({"k": {"tenant": "a", "priority": 10}}, "priority"),
    "reserved_slots": ({"k": {"tenant": "a", "reserved_slots": -1}}, "reserved_slots"),
    "reserved over the slots": ({"k": {"tenant": "a", "reserved_slots": 1}}, "reserved_slots add up to 1"),
    "tenant weight": ({"keys": {"k": {"tenant": "a"}}, "tenants": {"a": {"weight": -2}}}, "tenant 'a': weight"),
    "tenant max_concurrency": ({"keys": {"k": {"tenant": "a"}}, "tenants": {"a": {"max_concurrency": "x"}}}, "max_concurrency"),
    "tenant without a key": ({"keys": {"k": {"tenant": "a"}}, "tenants": {"b": {}}}, "tenant 'b' has no key"),
}


@pytest.mark.parametrize("case", list(KEY_FILE_BAD_VALUES))
def test_a_bad_scheduling_value_is_one_line_naming_it_before_anything_starts(case: str, tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from ragopt.cli import main

    content, needle = KEY_FILE_BAD_VALUES[case]
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(content), encoding="utf-8")
    code = main(["--workspace", str(tmp_path / "ws"), "serve", "--api-keys", str(keys), "--engine", "extractive",
                 "--dataset", str(write_beir(tmp_path / "tiny")), "--slots", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "[--api-keys]" in err[0] and needle in err[0], err
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize("flag,value", [("--aging", "0"), ("--aging", "-3")])
def test_a_bad_scheduling_flag_is_one_line(flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragopt.cli import main

    keys = tmp_path / "keys.json"
    keys.write_text('{"k": {"tenant": "a"}}', encoding="utf-8")
    code = main(["--workspace", str(tmp_path / "ws"), "serve", "--api-keys", str(keys), "--engine", "extractive",
                 "--dataset", str(write_beir(tmp_path / "tiny")), flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"[{flag}]" in err[0], err


def test_a_bad_request_deadline_is_400_naming_it(served_extractive: str) -> None:
    import httpx

    for bad in (0, -1, "soon", 10_000):
        r = httpx.post(f"{served_extractive}/v1/ask", json={"question": "x", "deadline_s": bad}, headers=BETA, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "deadline_s", (bad, r.text)


@pytest.fixture
def served_extractive(serve_files: dict[str, Path], tmp_path: Path) -> Iterator[str]:
    from ragopt.serve.build import ServeOptions
    from ragopt.serve.service import ServeSettings

    opts = ServeOptions(settings=ServeSettings(), plan=served_plan("extractive"), dataset=str(serve_files["dataset"]))
    with running_service(opts, tmp_path, serve_files["keys"]) as (url, _):
        yield url


def test_schedulers_behind_one_redis_order_tenants_by_their_service_everywhere(fresh_redis: str, clock: Clock) -> None:
    """Two serve processes' schedulers: tenant a floods the first; in the second, b goes ahead of a."""
    import redis

    from ragopt.serve.scheduler import SharedService

    client = redis.Redis.from_url(fresh_redis, decode_responses=True)
    first, second = (make(clock, shared=SharedService(client)) for _ in range(2))
    for _ in range(4):
        first.submit(ticket("a"))
    serve_in_turn(first, clock, steps=3)  # a: 300 tokens of service, given by the first process
    hold = ticket("c")
    second.submit(hold)  # the second process's slot is busy
    second.submit(ticket("b"))
    second.submit(ticket("a"))
    # counting only its own service, this process would see a and b level at 0 and serve a (by name) first
    assert serve_in_turn(second, clock, steps=3) == ["c", "b", "a"]
    assert SharedService(client).read_with_guesses()[0]["a"] >= 400


def test_behind_one_redis_a_returning_tenant_is_lifted_without_the_input_guesses_of_other_processes(fresh_redis: str,
                                                                                                    clock: Clock) -> None:
    """Tenant a has 300 tokens of service and a request running in the first process (its input guessed at 100);
    in the second, b returns while a waits: b starts level with a's 300, not with the guess-inflated 400, so b goes
    first (a is being served elsewhere). Leaving only local guesses out, b and a tie at 400 and a goes by name."""
    import redis

    from ragopt.serve.scheduler import SharedService

    client = redis.Redis.from_url(fresh_redis, decode_responses=True)
    first, second = (make(clock, shared=SharedService(client)) for _ in range(2))
    for _ in range(4):
        first.submit(ticket("a"))
    serve_in_turn(first, clock, steps=3)  # 300 tokens served; the 4th request runs with its input guessed at 100
    assert SharedService(client).read_with_guesses() == ({"a": 400.0}, {"a": 100.0})
    second.submit(ticket("c"))  # the second process's slot is busy
    second.submit(ticket("a"))
    second.submit(ticket("b"))
    assert serve_in_turn(second, clock, steps=3) == ["c", "b", "a"]
