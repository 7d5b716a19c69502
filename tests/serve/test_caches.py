"""Answer/retrieval cache keys: 10,000 random requests never hit across tenants, scopes or versions, on
diskcache and on a real Redis; TTL; normalization; personal and real-time requests are never cacheable."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ragopt.cache import DiskStore, RedisStore
from ragopt.serve.caches import CacheScope, ScopedCache, ServeCaches, normalize_question

TENANTS = ["acme", "beta", "gamma"]
SCOPES = [(), ("staff",), ("hr",), ("hr", "staff")]
QUESTIONS = ["What causes tides?", "what causes  TIDES", "Who lays the eggs?", "How do vaccines work?"]
MODELS = ["m1", "m2"]
PROMPTS = ["p1", "p2"]
KBS = ["kb1", "kb2"]


def _random_request(rng: random.Random) -> tuple[CacheScope, str]:
    scope = CacheScope(rng.choice(TENANTS), rng.choice(SCOPES), rng.choice(MODELS), rng.choice(PROMPTS), rng.choice(KBS))
    return scope, rng.choice(QUESTIONS)


def _identity(scope: CacheScope, question: str) -> tuple:
    return (scope.tenant, tuple(sorted(scope.scopes)), scope.model, scope.prompt_version, scope.kb_version, normalize_question(question))


def _property(cache: ScopedCache, n: int = 10_000, seed: int = 0) -> tuple[int, int]:
    """Each request reads, then (on a miss) writes a value naming its own identity; every hit must return a
    value written for exactly the reader's identity. Returns (hits, misses)."""
    rng = random.Random(seed)
    written: set[tuple] = set()
    hits = 0
    for _ in range(n):
        scope, question = _random_request(rng)
        # scopes arrive in any order: the key must not depend on it
        scope = CacheScope(scope.tenant, tuple(rng.sample(scope.scopes, len(scope.scopes))), scope.model,
                           scope.prompt_version, scope.kb_version)
        me = _identity(scope, question)
        got = cache.get(scope, question)
        if got is None:
            assert me not in written, f"a stored entry was missed: {me}"
            cache.set(scope, question, list(me))
            written.add(me)
        else:
            hits += 1
            assert tuple(tuple(x) if isinstance(x, list) else x for x in got) == me, f"cross hit: {got} for {me}"
    # every identity was seen, so both hits and misses happened
    assert 0 < hits < n
    return hits, n - hits


def test_no_cross_tenant_scope_or_stale_version_hits_on_diskcache(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "c")
    hits, misses = _property(ScopedCache(store, "answer", ttl_s=3600))
    # 3 tenants x 4 scope sets x 2 models x 2 prompts x 2 KBs x 3 normalized questions
    assert misses == 3 * 4 * 2 * 2 * 2 * 3
    store.close()


def test_no_cross_tenant_scope_or_stale_version_hits_on_redis(fresh_redis: str) -> None:
    store = RedisStore(fresh_redis)
    hits, misses = _property(ScopedCache(store, "answer", ttl_s=3600), seed=1)
    assert misses == 3 * 4 * 2 * 2 * 2 * 3
    store.close()


def test_stored_digests_on_redis_are_one_namespaces_and_only_its(fresh_redis: str) -> None:
    from ragopt.cache import Cache, CacheKey

    cache = Cache(store=RedisStore(fresh_redis))
    memo = [CacheKey(namespace="stage-memo", payload=i) for i in range(3)]
    cache.set_many([(k, "v") for k in memo + [CacheKey(namespace="stage-memo-old", payload=0), CacheKey(namespace="a", payload=0)]])
    assert cache.stored_digests("stage-memo") == {k.digest() for k in memo}
    cache.close()


def test_a_value_stored_under_another_identity_is_a_miss(tmp_path: Path) -> None:
    """Defence in depth: even a mis-keyed write (same digest, other identity) is never served."""
    store = DiskStore(tmp_path / "c")
    cache = ScopedCache(store, "answer", ttl_s=3600)
    acme = CacheScope("acme", ("staff",), "m", "p", "kb")
    beta = CacheScope("beta", ("staff",), "m", "p", "kb")
    cache.set(beta, "q", "beta's answer")
    store.set_many([(cache.key(acme, "q").digest(), store.get_many([cache.key(beta, "q").digest()])[0])], 60)
    assert cache.get(acme, "q") is None
    assert cache.get(beta, "q") == "beta's answer"
    store.close()


def test_a_disk_entry_expires_after_its_ttl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """diskcache compares its stored expiry with time.time(): a fake clock moves past the TTL without sleeping."""
    import diskcache.core

    now = [1_000_000.0]
    monkeypatch.setattr(diskcache.core.time, "time", lambda: now[0])
    store = DiskStore(tmp_path / "c")
    cache = ScopedCache(store, "answer", ttl_s=30)
    scope = CacheScope("acme", (), "m", "p", "kb")
    cache.set(scope, "q", "v")
    now[0] += 29.9
    assert cache.get(scope, "q") == "v"
    now[0] += 0.2
    assert cache.get(scope, "q") is None
    store.close()


def test_a_redis_entry_carries_its_ttl_in_milliseconds(fresh_redis: str) -> None:
    """Redis expires keys itself: what ragopt owes it is the TTL on every write (PTTL reads it back)."""
    import redis

    store = RedisStore(fresh_redis)
    cache = ScopedCache(store, "answer", ttl_s=30)
    scope = CacheScope("acme", (), "m", "p", "kb")
    cache.set(scope, "q", "v")
    assert cache.get(scope, "q") == "v"
    with redis.Redis.from_url(fresh_redis) as r:
        (key,) = r.keys(store.prefix + "*")
        assert 0 < r.pttl(key) <= 30_000
    store.close()


def test_question_normalization_keeps_meaning_apart() -> None:
    assert normalize_question("  What causes\tTIDES? ") == normalize_question("what causes tides")
    assert normalize_question("What causes tides?") != normalize_question("What causes no tides?")


def test_personal_and_realtime_requests_are_never_cacheable() -> None:
    assert ServeCaches.cacheable(personal=False, realtime=False)
    assert not ServeCaches.cacheable(personal=True, realtime=False)
    assert not ServeCaches.cacheable(personal=False, realtime=True)
