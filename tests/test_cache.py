"""The scoped cache: every part of the key changes the digest, hit/miss counts are honest, values persist."""

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
