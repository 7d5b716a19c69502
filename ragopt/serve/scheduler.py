"""The scheduler in front of generation: who gets the next free slot.

Every request waits in the queue of its API key, inside its tenant. When a slot frees, it goes to:
1. the highest priority class among the queues' heads that may start now (a key's `priority`; aging lifts a
   waiting request one class per `aging_s` seconds waited, up to the highest class waiting, so no request
   waits forever behind a privileged flood);
2. within that class, the backlogged tenant with the least weighted service (model tokens in and out divided
   by the tenant's weight), then its key with the least weighted service: the Virtual Token Counter rule
   (Sheng et al., OSDI 2024). A tenant that becomes backlogged again is lifted to the least counter among
   the backlogged tenants (or the virtual time when none waits), so idleness earns no burst of credit, and
   the service gap between two backlogged tenants stays bounded (2x the largest request's tokens in VTC);
3. equal counters go to the one served longest ago, then by name, key id and arrival: the order is total.

A head may start only when its key and its tenant are under their concurrency caps and the slots left after
it still cover the other keys' unused `reserved_slots`. A request whose deadline leaves less time than the
fastest recent service is refused (503, Retry-After) before it takes a slot: at arrival or while waiting,
never after a wasted prefill. With `serial_prefill`, a slot is granted only once every granted request has
its first token: prompts are then evaluated one at a time, beside the other slots' decoding, so a request's
TTFT is not shared with prompts granted after it (on CPU a batch computes every slot's tokens on the same
cores; bench_batch_floor measures what that costs). The `fifo` policy (arrival order, one counter) is the old admission, kept as
the benchmark's baseline. With `shared` (Redis), the tenants' counters are the service every serve process
behind that Redis gave them, so a tenant that floods one process is behind in the others too.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from ragopt.errors import SlotRefused

Policy = Literal["fair", "fifo"]


@dataclass(frozen=True)
class KeyPolicy:
    """What the API-key file sets for one key."""

    weight: float = 1.0
    max_concurrency: int | None = None
    priority: int = 0
    reserved_slots: int = 0


@dataclass(frozen=True)
class TenantPolicy:
    """What the API-key file sets for one tenant (shared by its keys)."""

    weight: float = 1.0
    max_concurrency: int | None = None


def slot_limit(slots: int, kv_budget_bytes: float | None = None, kv_bytes_per_sequence: float | None = None) -> int:
    """Requests that may generate at once: min(backend slots, full-context KV sequences the budget holds)."""
    limit = slots
    if kv_budget_bytes is not None and kv_bytes_per_sequence:
        from ragopt.capacity import MemoryBudget, max_concurrent_sequences

        limit = min(limit, max_concurrent_sequences(MemoryBudget(total_bytes=kv_budget_bytes, margin_fraction=0.0), kv_bytes_per_sequence))
    return max(limit, 0)


@dataclass(eq=False)
class Ticket:
    """One request's place: in a key's queue, then in a slot."""

    tenant: str
    key_id: str
    key: KeyPolicy
    tenant_policy: TenantPolicy
    deadline: float | None  # monotonic seconds
    seq: int = 0
    enqueued: float = 0.0
    started: float | None = None
    charged: float = 0.0  # model tokens charged so far
    estimate: float = 0.0  # of those, the input tokens guessed at its grant (settled when it leaves its slot)
    cancelled: bool = False
    prefilling: bool = False  # granted a slot, no token yet


@dataclass
class _Account:
    """A tenant's or a key's weighted service counter, queue and running count."""

    weight: float
    counter: float = 0.0
    guessed: float = 0.0  # the part of counter that running requests' input guesses make (weighted)
    running: int = 0
    reserved: int = 0  # slots held for this key even when others wait
    queue: deque = field(default_factory=deque)  # a key's tickets (a tenant's account leaves it empty)
    waiting: int = 0
    vtime: float = 0.0  # a tenant's: the counter of its key served last (where a returning key starts)
    last_served: int = -1  # the grant number of its last slot: equal counters go to the one served longest ago


# KEYS[1] the hash; ARGV: tenant, floor. Raises the tenant's counter to at least floor; returns it.
_RAISE_LUA = """
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local floor = tonumber(ARGV[2])
if cur < floor then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]); return ARGV[2] end
return tostring(cur)
"""


class SharedService:
    """The tenants' weighted service counters in a Redis hash, so that several serve processes behind one Redis
    order tenants by the service all of them gave (each process still schedules its own slots). A second hash
    holds the part of each counter that running requests' input guesses make, in every process, so that the
    lift can leave them out wherever the requests run."""

    def __init__(self, client: Any, key: str = "ragopt:scheduler:service"):
        self.client = client
        self.key = key
        self.guessed_key = f"{key}:guessed"
        self._raise = client.register_script(_RAISE_LUA)

    def add(self, tenant: str, amount: float) -> None:
        self.client.hincrbyfloat(self.key, tenant, amount)

    def guess(self, tenant: str, amount: float) -> None:
        self.client.hincrbyfloat(self.guessed_key, tenant, amount)

    def raise_to(self, tenant: str, floor: float) -> float:
        return float(self._raise(keys=[self.key], args=[tenant, repr(floor)]))

    def read_with_guesses(self) -> tuple[dict[str, float], dict[str, float]]:
        """(counters, guessed parts), read together."""
        pipe = self.client.pipeline()
        pipe.hgetall(self.key)
        pipe.hgetall(self.guessed_key)
        counters, guessed = pipe.execute()
        return _floats(counters), _floats(guessed)


def _floats(mapping: dict[Any, Any]) -> dict[str, float]:
    return {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in mapping.items()}


class Scheduler:
    def __init__(self, limit: int, queue_timeout_s: float = 30.0, max_queue: int = 64, aging_s: float = 10.0,
                 policy: Policy = "fair", clock: Callable[[], float] = time.monotonic, recent: int = 16,
                 shared: SharedService | None = None, serial_prefill: bool = False):
        self.limit = limit
        self.serial_prefill = serial_prefill
        self.prefilling = 0  # granted requests without their first token
        self.queue_timeout_s = queue_timeout_s
        self.max_queue = max_queue
        self.aging_s = aging_s
        self.policy = policy
        self.clock = clock
        self.shared = shared
        self.running = 0
        self.waiting = 0
        self.vtime = 0.0  # the counter of the last tenant served: where a returning tenant starts
        self.refused: dict[str, int] = {}
        self._tenants: dict[str, _Account] = {}
        self._keys: dict[tuple[str, str], _Account] = {}
        self._seq = itertools.count()
        self._grants = itertools.count()
        self._recent: deque[float] = deque(maxlen=recent)  # service seconds of the last finished requests
        self._input_tokens: deque[int] = deque(maxlen=recent)
        self._cond = threading.Condition()

    # --- estimates ---------------------------------------------------------------------------------------
    def fastest_service_s(self) -> float | None:
        """The fastest recent service (slot taken to slot freed): a request with less time left cannot finish."""
        return min(self._recent) if self._recent else None

    def _input_estimate(self) -> float:
        return sorted(self._input_tokens)[len(self._input_tokens) // 2] if self._input_tokens else 0.0

    # --- the public protocol: acquire, charge, release, cancel ---------------------------------------------
    def acquire(self, ticket: Ticket) -> float:
        """Wait for a slot; returns the seconds waited. Raises SlotRefused (the ticket never took a slot)."""
        with self._cond:
            self.submit(ticket)
            try:
                while ticket.started is None:
                    self._wait_turn(ticket)
            except BaseException:
                if ticket.started is None:
                    self._dequeue(ticket)
                    self._dispatch()
                raise
        return ticket.started - ticket.enqueued

    def submit(self, ticket: Ticket) -> None:
        """Queue the ticket (it may start at once: `ticket.started`); raises SlotRefused when it cannot wait."""
        with self._cond:
            now = self.clock()
            ticket.enqueued, ticket.seq = now, next(self._seq)
            if self.limit <= 0:
                self._refuse("kv", "no request fits the KV budget", 60.0, 429)
            if self.waiting >= self.max_queue and self.running >= self.limit:
                self._refuse("queue_full", f"{self.waiting} requests already wait", 1.0, 429)
            self._check_deadline(ticket, now)
            self._enqueue(ticket)
            self._dispatch()

    def charge(self, ticket: Ticket, tokens: float) -> None:
        """Model tokens a running request has used (its output as it streams)."""
        if tokens <= 0 or ticket.started is None:
            return
        with self._cond:
            self._charge(ticket, tokens)
            if ticket.prefilling:
                self._prefill_done(ticket)
                if self.serial_prefill:  # only then does a first token free a grant
                    self._dispatch()

    def release(self, ticket: Ticket, tokens_in: int, tokens_out: int) -> None:
        """The request left its slot; its charge is settled to the tokens it really used."""
        with self._cond:
            if ticket.started is None:
                return
            self._charge(ticket, tokens_in + tokens_out - ticket.charged)
            self._guess(ticket, -ticket.estimate)
            ticket.estimate = 0.0
            if ticket.prefilling:
                self._prefill_done(ticket)
            if not ticket.cancelled and tokens_out > 0:
                self._recent.append(self.clock() - ticket.started)
            if tokens_in > 0:
                self._input_tokens.append(tokens_in)
            self.running -= 1
            self._tenants[ticket.tenant].running -= 1
            self._keys[(ticket.tenant, ticket.key_id)].running -= 1
            ticket.started = None
            self._dispatch()

    def cancel(self, ticket: Ticket) -> None:
        """The client went away: a waiting ticket leaves its queue now (a running one stops at its next token)."""
        with self._cond:
            ticket.cancelled = True
            self._cond.notify_all()

    def register(self, tenant: str, key_id: str, key: KeyPolicy, tenant_policy: TenantPolicy) -> None:
        """Make a key known before its first request, so its reserved slots are held from the start."""
        with self._cond:
            self._tenants.setdefault(tenant, _Account(tenant_policy.weight))
            self._keys.setdefault((tenant, key_id), _Account(key.weight, reserved=key.reserved_slots))

    def snapshot(self) -> dict[str, dict[str, float]]:
        """Per tenant: weighted service counter, running and waiting requests (for /metrics and tests)."""
        with self._cond:
            return {t: {"service": a.counter, "running": a.running, "waiting": a.waiting} for t, a in sorted(self._tenants.items())}

    # --- internals (called with the condition held) --------------------------------------------------------
    def _refuse(self, reason: str, message: str, retry_after_s: float, status: int) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1
        raise SlotRefused(message, retry_after_s, status, reason)

    def _check_deadline(self, ticket: Ticket, now: float) -> None:
        fastest = self.fastest_service_s()
        if ticket.deadline is None or fastest is None or ticket.deadline - now >= fastest:
            return
        backlog = (self.waiting + self.running) / max(self.limit, 1)
        self._refuse("deadline", f"deadline cannot be met: {max(ticket.deadline - now, 0):.1f} s left, the fastest recent "
                     f"answer took {fastest:.1f} s", max(1.0, backlog * fastest), 503)

    def _wait_turn(self, ticket: Ticket) -> None:
        now = self.clock()
        if ticket.cancelled:
            self._refuse("cancelled", "the client went away while waiting", 0.0, 499)
        self._check_deadline(ticket, now)
        give_up = ticket.enqueued + self.queue_timeout_s
        if now >= give_up:
            self._refuse("queue_timeout", f"no generation slot within {self.queue_timeout_s:.1f} s", 1.0, 429)
        wake = give_up
        fastest = self.fastest_service_s()
        if ticket.deadline is not None and fastest is not None:
            wake = min(wake, ticket.deadline - fastest)
        self._cond.wait(max(wake - now, 0.0) + 1e-3)

    def _enqueue(self, ticket: Ticket) -> None:
        self.register(ticket.tenant, ticket.key_id, ticket.key, ticket.tenant_policy)
        t, k = self._tenants[ticket.tenant], self._keys[(ticket.tenant, ticket.key_id)]
        self._sync()
        # VTC's lift: a tenant back from idle starts level with the backlogged ones, at the service they really had:
        # without the running requests' input guesses (in every process, with Redis), which their release may
        # settle lower (the lifted tenant would then be ahead of them and wait for two requests instead of one)
        if t.waiting == 0:
            backlogged = [a.counter - a.guessed for a in self._tenants.values() if a.waiting > 0]
            t.counter = max(t.counter, min(backlogged) if backlogged else self.vtime)
            if self.shared is not None:
                t.counter = self.shared.raise_to(ticket.tenant, t.counter)
        if not k.queue:  # the same rule among the tenant's keys
            peers = [a.counter - a.guessed for (tn, _), a in self._keys.items() if tn == ticket.tenant and a.queue]
            k.counter = max(k.counter, min(peers) if peers else t.vtime)
        k.queue.append(ticket)
        t.waiting += 1
        self.waiting += 1

    def _dequeue(self, ticket: Ticket) -> None:
        k = self._keys[(ticket.tenant, ticket.key_id)]
        if ticket in k.queue:
            k.queue.remove(ticket)
            self._tenants[ticket.tenant].waiting -= 1
            self.waiting -= 1

    def _sync(self) -> None:
        """Take the tenants' counters and their guessed parts from Redis (what every process served them)."""
        if self.shared is None:
            return
        counters, guessed = self.shared.read_with_guesses()
        for tenant, value in counters.items():
            if tenant in self._tenants:
                self._tenants[tenant].counter = value
                self._tenants[tenant].guessed = guessed.get(tenant, 0.0)

    def _charge(self, ticket: Ticket, tokens: float) -> None:
        ticket.charged += tokens
        self._tenants[ticket.tenant].counter += tokens / ticket.tenant_policy.weight
        if self.shared is not None:
            self.shared.add(ticket.tenant, tokens / ticket.tenant_policy.weight)
        self._keys[(ticket.tenant, ticket.key_id)].counter += tokens / ticket.key.weight

    def _guess(self, ticket: Ticket, tokens: float) -> None:
        self._tenants[ticket.tenant].guessed += tokens / ticket.tenant_policy.weight
        if self.shared is not None:
            self.shared.guess(ticket.tenant, tokens / ticket.tenant_policy.weight)
        self._keys[(ticket.tenant, ticket.key_id)].guessed += tokens / ticket.key.weight

    def _may_start(self, ticket: Ticket) -> bool:
        t, k = self._tenants[ticket.tenant], self._keys[(ticket.tenant, ticket.key_id)]
        if ticket.key.max_concurrency is not None and k.running >= ticket.key.max_concurrency:
            return False
        if ticket.tenant_policy.max_concurrency is not None and t.running >= ticket.tenant_policy.max_concurrency:
            return False
        held_for_others = sum(max(0, a.reserved - a.running) for name, a in self._keys.items()
                              if a.reserved and name != (ticket.tenant, ticket.key_id))
        return self.limit - self.running - held_for_others >= 1

    def _order(self, ticket: Ticket, top: int, now: float) -> tuple:
        if self.policy == "fifo":
            return (ticket.seq,)
        aged = ticket.key.priority + int((now - ticket.enqueued) / self.aging_s)
        t, k = self._tenants[ticket.tenant], self._keys[(ticket.tenant, ticket.key_id)]
        return (-min(aged, top), t.counter, t.last_served, ticket.tenant, k.counter, k.last_served, ticket.key_id, ticket.seq)

    def _prefill_done(self, ticket: Ticket) -> None:
        ticket.prefilling = False
        self.prefilling -= 1

    def _dispatch(self) -> None:
        """Hand free slots to the best heads, one at a time (each grant changes the next one's conditions)."""
        if self.running < self.limit and self.waiting > 0:
            self._sync()
        while self.running < self.limit and self.waiting > 0 and not (self.serial_prefill and self.prefilling):
            heads = [q.queue[0] for q in self._keys.values() if q.queue]
            top = max(h.key.priority for h in heads)
            now = self.clock()
            ready = [h for h in heads if self._may_start(h)]
            if not ready:
                return
            best = min(ready, key=lambda h: self._order(h, top, now))
            self._dequeue(best)
            best.started, best.prefilling = now, True
            self.running += 1
            self.prefilling += 1
            t, k = self._tenants[best.tenant], self._keys[(best.tenant, best.key_id)]
            self.vtime, t.vtime = t.counter, k.counter
            t.last_served = k.last_served = next(self._grants)
            t.running += 1
            k.running += 1
            best.estimate = self._input_estimate()
            self._charge(best, best.estimate)
            self._guess(best, best.estimate)
            self._cond.notify_all()
