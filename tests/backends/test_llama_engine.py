"""The llama.cpp engine's model-free parts: the FIFO lock requests queue on, and the saved-prefix cache."""

from __future__ import annotations

import threading
import time

from ragopt.backends.llama_engine import FifoLock, PrefixStateCache, SavedPrefix
from ragopt.cache import CacheKey


def test_prefix_state_cache_accounting_and_isolation():
    cache = PrefixStateCache(max_entries=10, max_bytes=1000)
    key = lambda tenant: CacheKey(namespace="kv_prefix", tenant=tenant, model="m", prompt_version="v", payload=(1, 2, 3))  # noqa: E731
    item = SavedPrefix(tokens=(1, 2, 3), state=b"x" * 388)
    assert item.nbytes == 400
    assert cache.put(key("a"), item) and cache.bytes_used == 400
    assert cache.get(key("b"), (1, 2, 3)) is None  # another tenant, same tokens: never found
    assert cache.get(key("a"), (1, 2, 4)) is None  # same key, other tokens: never returned
    assert cache.get(key("a"), (1, 2, 3)) is item
    cache.put(key("b"), item)
    cache.put(key("c"), item)  # 1200 bytes > 1000: the least recently used goes
    assert cache.bytes_used == 800 and cache.evictions == 1 and len(cache) == 2
    assert not cache.put(key("d"), SavedPrefix(tokens=(), state=b"y" * 1001))  # larger than the bound
    assert cache.bytes_used == 800


def wait_for_waiters(lock: FifoLock, n: int) -> None:
    """Until n threads wait for the lock: the next one is started only once the previous one queued."""
    give_up = time.monotonic() + 30
    while lock.waiting < n:
        assert time.monotonic() < give_up, f"only {lock.waiting} of {n} waiters queued"
        time.sleep(0.001)


def test_fifo_lock_order_and_timeout():
    lock = FifoLock()
    assert lock.acquire()
    assert not lock.acquire(timeout=0.01)  # held: a timed wait gives up
    assert lock.waiting == 0  # and leaves the queue
    order: list[int] = []

    def waiter(i: int) -> None:
        assert lock.acquire(timeout=30)
        order.append(i)
        lock.release()

    threads = []
    for i in range(3):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        wait_for_waiters(lock, i + 1)  # arrival order is known, not guessed from sleeps
    lock.release()
    for t in threads:
        t.join()
    assert order == [0, 1, 2] and lock.waiting == 0
