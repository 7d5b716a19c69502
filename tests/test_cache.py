"""The one cache: every part of the key changes the digest, hit/miss counts are honest, values persist, each
missing key is computed once by get_or_compute, a killed computation keeps what it finished, a mis-keyed entry
is a miss, the memory in front is bounded and expires."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.cache import Cache, CacheKey

BASE = CacheKey(
    namespace="answer", tenant="north", scopes=("clinical",), model="m1", prompt_version="p1",
    kb_version="kb1", payload={"q": "what is eGFR?"},
)  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        {"namespace": "embedding"},
        {"tenant": "south"},
        {"tenant": None},
        {"scopes": ("finance",)},
        {"scopes": ()},
        {"scopes": ("clinical", "finance")},
        {"model": "m2"},
        {"prompt_version": "p2"},
        {"kb_version": "kb2"},
        {"payload": {"q": "what is eGFR? "}},
    ],
)
def test_every_part_of_the_key_changes_the_digest(change: dict) -> None:
    assert BASE.model_copy(update=change).digest() != BASE.digest()


def test_digest_is_canonical() -> None:
    same = CacheKey(
        namespace="answer", tenant="north", scopes=("clinical",), model="m1", prompt_version="p1",
        kb_version="kb1", payload={"q": "what is eGFR?"},
    )  # fmt: skip
    assert same.digest() == BASE.digest()
    a = CacheKey(namespace="x", scopes=("b", "a"), payload={"k": 1, "j": 2})
    b = CacheKey(namespace="x", scopes=("a", "b", "a"), payload={"j": 2, "k": 1})
    assert a.digest() == b.digest()  # scope order and duplicates, payload key order: irrelevant
    assert BASE.digest().startswith("answer:")


@pytest.mark.parametrize("on_disk", [False, True])
def test_hits_and_misses_are_counted_honestly(tmp_path: Path, on_disk: bool) -> None:
    cache = Cache(tmp_path / "c" if on_disk else None)
    k1, k2, k3 = (CacheKey(namespace="t", payload=i) for i in range(3))
    assert cache.get(k1) is None and (cache.cache_hits, cache.cache_misses) == (0, 1)
    cache.set(k1, b"one")
    cache.set_many([(k2, b"two"), (k3, {"three": 3})])
    assert cache.get_many([k1, k2, k3, CacheKey(namespace="t", payload=99)]) == [b"one", b"two", {"three": 3}, None]
    assert (cache.cache_hits, cache.cache_misses) == (3, 2)
    # another tenant asking for the same payload misses
    assert cache.get(k1.model_copy(update={"tenant": "other"})) is None and cache.cache_misses == 3
    cache.close()


def test_values_persist_across_instances(tmp_path: Path) -> None:
    key = CacheKey(namespace="embedding", tenant="a", model="fp", payload={"text": "hello"})
    first = Cache(tmp_path / "cache")
    first.set(key, b"\x00\x01vector")
    first.close()
    second = Cache(tmp_path / "cache")
    assert (second.cache_hits, second.cache_misses) == (0, 0)  # counters belong to an instance, not to the folder
    assert second.get(key) == b"\x00\x01vector" and second.cache_hits == 1
    assert second.get(key.model_copy(update={"tenant": "b"})) is None and second.cache_misses == 1
    second.close()


def _keys(*payloads: object) -> list[CacheKey]:
    return [CacheKey(namespace="t", tenant="north", payload=p) for p in payloads]


@pytest.mark.parametrize("on_disk", [False, True])
def test_get_or_compute_computes_each_missing_key_once_and_counts_per_key(tmp_path: Path, on_disk: bool) -> None:
    cache = Cache(tmp_path / "c" if on_disk else None)
    asked: list[list[int]] = []

    def square(missing: list[int]):  # type: ignore[no-untyped-def]
        asked.append(list(missing))
        for i in missing:
            yield i, payloads[i] ** 2

    payloads = [3, 4, 3, 5]
    first = cache.get_or_compute(_keys(*payloads), square)
    assert first.values == [9, 16, 9, 25] and asked == [[0, 1, 3]]  # the repeated 3 is computed once
    assert (first.cache_hits, first.cache_misses) == (0, 4)
    payloads = [5, 3, 6]
    second = cache.get_or_compute(_keys(*payloads), square)
    assert second.values == [25, 9, 36] and asked[-1] == [2]
    assert (second.cache_hits, second.cache_misses) == (2, 1)
    assert (cache.cache_hits, cache.cache_misses) == (2, 5)
    cache.close()


def test_get_or_compute_keeps_what_was_computed_before_a_failure(tmp_path: Path) -> None:
    """A killed run keeps every value it yielded; the re-run computes only the rest."""
    cache = Cache(tmp_path / "c")

    def dies_after_two(missing: list[int]):  # type: ignore[no-untyped-def]
        for i in missing[:2]:
            yield i, f"v{i}"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.get_or_compute(_keys(0, 1, 2, 3), dies_after_two, save_every=100)
    cache.close()
    again = Cache(tmp_path / "c")
    rest: list[int] = []

    def finish(missing: list[int]):  # type: ignore[no-untyped-def]
        rest.extend(missing)
        return [(i, f"v{i}") for i in missing]

    found = again.get_or_compute(_keys(0, 1, 2, 3), finish)
    assert found.values == ["v0", "v1", "v2", "v3"] and rest == [2, 3] and found.cache_hits == 2
    again.close()


def test_encode_none_is_not_stored_and_decode_reads_back(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c")
    calls: list[int] = []

    def compute(missing: list[int]):  # type: ignore[no-untyped-def]
        calls.extend(missing)
        return [(0, "transient failure"), (1, "answer")]

    encode = lambda v: None if v.startswith("transient") else {"text": v}  # noqa: E731
    decode = lambda stored: stored["text"]  # noqa: E731
    assert cache.get_or_compute(_keys("a", "b"), compute, encode=encode, decode=decode).values == ["transient failure", "answer"]
    again = cache.get_or_compute(_keys("a", "b"), compute, encode=encode, decode=decode)
    assert again.values == ["transient failure", "answer"] and calls == [0, 1, 0]  # only the failure is asked again
    cache.close()


def test_a_mis_keyed_entry_is_a_miss_even_from_memory(tmp_path: Path) -> None:
    """Defence in depth: an entry copied under another key's digest fails the identity check on read."""
    cache = Cache(tmp_path / "c")
    north, south = (CacheKey(namespace="answer", tenant=t, payload="q") for t in ("north", "south"))
    cache.set(north, "north's answer")
    entry = cache.store.get_many([north.digest()])[0]
    cache.store.set_many([(south.digest(), entry)], None)
    assert cache.get(south) is None and cache.get(north) == "north's answer"
    cache.close()


def test_memory_in_front_is_bounded_and_expires_with_the_ttl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time as time_module

    now = [1_000_000.0]
    monkeypatch.setattr(time_module, "time", lambda: now[0])
    cache = Cache(tmp_path / "c", ttl_s=30, memory_items=2)
    keys = _keys(1, 2, 3)
    cache.set_many([(k, i) for i, k in enumerate(keys)])
    assert len(cache._memory) == 2  # the oldest fell out of memory, not out of the cache
    assert cache.get_many(keys) == [0, 1, 2]
    now[0] += 30.5
    assert cache.get_many(keys) == [None, None, None]
    cache.close()


def test_evict_drops_one_namespace_from_memory_and_disk(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c")
    a, b = CacheKey(namespace="trial", payload=1), CacheKey(namespace="embedding", payload=1)
    cache.set_many([(a, "x"), (b, "y")])
    assert cache.evict("trial") == 1
    assert cache.get(a) is None and cache.get(b) == "y"
    cache.close()


@pytest.mark.parametrize("store", ["memory", "disk"])
def test_stored_digests_are_one_namespaces_and_only_its(store: str, tmp_path: Path) -> None:
    cache = Cache(None if store == "memory" else tmp_path / "c")
    memo = [CacheKey(namespace="stage-memo", payload=i) for i in range(3)]
    others = [CacheKey(namespace="stage-memo-old", payload=0), CacheKey(namespace="stage", payload=0),
              CacheKey(namespace="embedding", payload=0), CacheKey(namespace="zz", payload=0)]
    cache.set_many([(k, "v") for k in memo + others])
    assert cache.stored_digests("stage-memo") == {k.digest() for k in memo}
    assert cache.stored_digests("nothing") == set()
    cache.close()


def test_the_workspace_cache_lives_in_the_workspace(tmp_path: Path) -> None:
    from ragopt.cache import workspace_cache

    cache = workspace_cache(tmp_path)
    assert cache.directory == tmp_path / "cache" and (tmp_path / "cache").is_dir()
    cache.close()
