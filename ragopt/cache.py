"""The one cache of ragopt: canonical scoped keys, a bounded memory in front of diskcache or Redis, ONE
`get_or_compute`, honest hit accounting, and the workspace's cache folder.

Every key carries tenant, permission scopes, model, prompt version and knowledge-base version, even where a
value does not depend on some of them: a cache must never be the way one tenant's data reaches another.
Every stored entry also carries a second hash of its key's identity, checked on read: a digest collision or
a mis-keyed write is a miss, never another tenant's value.

Layers above (embeddings, answer scores, judge verdicts, synthetic questions, rewrites, trial outcomes, the
stage memo, serve's answer and retrieval caches) all read and write through `Cache`; none writes its own
get / compute / put loop.
"""

from __future__ import annotations

import collections
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from pydantic import BaseModel, ConfigDict

from ragopt.config import canonical_json


class CacheKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str  # "embedding", "answer", ...
    tenant: str | None = None
    scopes: tuple[str, ...] = ()
    model: str = ""  # a fingerprint of weights/config, never only a name
    prompt_version: str = ""
    kb_version: str = ""
    payload: Any = None  # what else decides the value: the text, the options

    def identity(self) -> dict[str, Any]:
        """Everything the key says, canonical: scopes sorted and without duplicates."""
        data = self.model_dump(mode="json")
        data["scopes"] = sorted(set(data["scopes"]))
        return data

    def address(self) -> tuple[str, str]:
        """(digest, check): where the entry lives, and a second hash of the identity, independent of the
        digest's, stored with the value and compared on read."""
        canonical = canonical_json(self.identity())
        return (f"{self.namespace}:{hashlib.sha256(canonical).hexdigest()[:16]}",  # = fingerprint(identity), hashed once
                hashlib.blake2b(canonical, digest_size=8, person=b"ragopt-check").hexdigest())

    def digest(self) -> str:
        return self.address()[0]


Entry = Any  # what a Store keeps under a digest: (check, stored value)


class Store(Protocol):
    """Where entries live, by digest. `ttl_s` None keeps them until evicted."""

    def get_many(self, digests: Sequence[str]) -> list[Entry | None]: ...

    def set_many(self, items: Sequence[tuple[str, Entry]], ttl_s: float | None) -> None: ...

    def delete_namespace(self, namespace: str) -> int: ...

    def digests(self, namespace: str) -> set[str]: ...

    def close(self) -> None: ...


class MemoryStore:
    """A dict: the whole cache of one process (tests, private embedders)."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[Entry, float | None]] = {}

    def get_many(self, digests: Sequence[str]) -> list[Entry | None]:
        now = time.time()
        found = (self._items.get(d) for d in digests)
        return [None if f is None or (f[1] is not None and f[1] <= now) else f[0] for f in found]

    def set_many(self, items: Sequence[tuple[str, Entry]], ttl_s: float | None) -> None:
        expires = None if ttl_s is None else time.time() + ttl_s
        self._items.update((d, (e, expires)) for d, e in items)

    def delete_namespace(self, namespace: str) -> int:
        doomed = self.digests(namespace)
        for d in doomed:
            del self._items[d]
        return len(doomed)

    def digests(self, namespace: str) -> set[str]:
        return {d for d in self._items if d.startswith(f"{namespace}:")}

    def close(self) -> None:
        pass


class DiskStore:
    """diskcache (SQLite) with per-entry expiry: persistent, safe for several processes on one machine."""

    def __init__(self, directory: str | Path, size_limit: int = 8 * 2**30):
        import diskcache

        Path(directory).mkdir(parents=True, exist_ok=True)
        self._cache = diskcache.Cache(str(directory), size_limit=size_limit)

    def get_many(self, digests: Sequence[str]) -> list[Entry | None]:
        return [self._cache.get(d) for d in digests]

    def set_many(self, items: Sequence[tuple[str, Entry]], ttl_s: float | None) -> None:
        with self._cache.transact():  # one SQLite transaction instead of one per key
            for d, e in items:
                self._cache.set(d, e, expire=ttl_s)

    def delete_namespace(self, namespace: str) -> int:
        doomed = self.digests(namespace)
        for k in doomed:
            self._cache.delete(k)
        return len(doomed)

    def digests(self, namespace: str) -> set[str]:
        """One range query on diskcache's (key, raw) index: its public `iterkeys` walks every key from the first,
        a million embeddings before the stage memo's. Digests are str keys, which diskcache stores raw."""
        rows = self._cache._sql("SELECT key FROM Cache WHERE key >= ? AND key < ? AND raw = 1",  # noqa: SLF001
                                (f"{namespace}:", f"{namespace};"))  # ";" follows ":"
        return {key for (key,) in rows.fetchall()}

    def close(self) -> None:
        self._cache.close()


class RedisStore:
    """Redis (`redis://host:port/db`), shared by every process pointed at it. Entries are JSON (never pickle:
    a shared server must not be able to run code in a reader), so values must be JSON-able."""

    def __init__(self, url: str, prefix: str = "ragopt:cache:"):
        import redis

        self._redis = redis.Redis.from_url(url, decode_responses=True)
        self.prefix = prefix

    def get_many(self, digests: Sequence[str]) -> list[Entry | None]:
        if not digests:
            return []
        raw = self._redis.mget([self.prefix + d for d in digests])
        return [None if r is None else json.loads(r) for r in raw]

    def set_many(self, items: Sequence[tuple[str, Entry]], ttl_s: float | None) -> None:
        px = None if ttl_s is None else max(int(ttl_s * 1000), 1)
        with self._redis.pipeline() as pipe:
            for d, e in items:
                pipe.set(self.prefix + d, json.dumps(e, separators=(",", ":")), px=px)
            pipe.execute()

    def delete_namespace(self, namespace: str) -> int:
        doomed = [self.prefix + d for d in self.digests(namespace)]
        return int(self._redis.delete(*doomed)) if doomed else 0

    def digests(self, namespace: str) -> set[str]:
        return {k.removeprefix(self.prefix) for k in self._redis.scan_iter(match=f"{self.prefix}{namespace}:*")}

    def close(self) -> None:
        self._redis.close()


def open_store(redis_url: str | None, directory: str | Path, size_limit: int = 8 * 2**30) -> Store:
    return RedisStore(redis_url) if redis_url else DiskStore(directory, size_limit)


@dataclass
class Lookup:
    """What `get_or_compute` found: the values in the keys' order, and how many of the keys were answered
    from the cache (cache_hits) or by computing (cache_misses; a key repeated in one call is computed once)."""

    values: list[Any]
    cache_hits: int
    cache_misses: int


def _same(value: Any) -> Any:
    return value


class Cache:
    """Entries of a Store behind a bounded LRU memory of its last `memory_items` entries; counts cache hits
    and misses (cache_hits, cache_misses) over its life. `Cache(None)` keeps everything in memory,
    `Cache(folder)` on disk, `Cache(store=RedisStore(url))` in Redis; `ttl_s` expires every entry it writes."""

    def __init__(self, directory: str | Path | None = None, *, store: Store | None = None, ttl_s: float | None = None,
                 memory_items: int = 256):
        self.directory = Path(directory) if directory is not None else None
        if store is None:
            store = MemoryStore() if self.directory is None else DiskStore(self.directory)
        self.store = store
        self.ttl_s = ttl_s
        self.memory_items = 0 if isinstance(store, MemoryStore) else memory_items
        self._memory: collections.OrderedDict[str, tuple[Entry, float | None]] = collections.OrderedDict()
        self.cache_hits = 0
        self.cache_misses = 0

    def _remember(self, digest: str, entry: Entry) -> None:
        if self.memory_items <= 0:
            return
        self._memory[digest] = (entry, None if self.ttl_s is None else time.time() + self.ttl_s)
        self._memory.move_to_end(digest)
        while len(self._memory) > self.memory_items:
            self._memory.popitem(last=False)

    def _entries(self, digests: Sequence[str]) -> list[Entry | None]:
        """Memory first, then the store for the rest (in one call)."""
        now = time.time()
        out: list[Entry | None] = []
        for d in digests:
            found = self._memory.get(d)
            if found is not None and (found[1] is None or found[1] > now):
                self._memory.move_to_end(d)
                out.append(found[0])
            else:
                self._memory.pop(d, None)
                out.append(None)
        rest = [i for i, e in enumerate(out) if e is None]
        for i, entry in zip(rest, self.store.get_many([digests[i] for i in rest])):
            if entry is not None:
                out[i] = entry
                self._remember(digests[i], entry)
        return out

    def _read(self, addresses: Sequence[tuple[str, str]], *, count: bool = True) -> list[Any]:
        entries = self._entries([d for d, _ in addresses])
        out = [e[1] if e is not None and e[0] == check else None for (_, check), e in zip(addresses, entries)]
        if count:
            self._count(sum(v is not None for v in out), len(out))
        return out

    def _count(self, found: int, asked: int) -> None:
        self.cache_hits += found
        self.cache_misses += asked - found

    def _write(self, items: Iterable[tuple[tuple[str, str], Any]]) -> None:
        entries = [(d, [check, v]) for (d, check), v in items if v is not None]
        if entries:
            self.store.set_many(entries, self.ttl_s)
            for d, e in entries:
                self._remember(d, e)

    def get_many(self, keys: Sequence[CacheKey]) -> list[Any]:
        """The stored value of each key, None where there is none (or the entry is not this key's)."""
        return self._read([k.address() for k in keys])

    def get(self, key: CacheKey) -> Any:
        return self.get_many([key])[0]

    def set_many(self, items: Iterable[tuple[CacheKey, Any]]) -> None:
        """Store each value (None is never stored: it reads as a miss) in one write to the store."""
        self._write((k.address(), v) for k, v in items)

    def set(self, key: CacheKey, value: Any) -> None:
        self.set_many([(key, value)])

    def get_or_compute(self, keys: Sequence[CacheKey], compute: Callable[[list[int]], Iterable[tuple[int, Any]]], *,
                       encode: Callable[[Any], Any] = _same, decode: Callable[[Any], Any] = _same,
                       save_every: int = 1024) -> Lookup:
        """The value of every key, computing only what the cache does not hold, each distinct key once.

        `compute(indexes)` gets the index (into `keys`) of the first key of every missing digest and yields
        (index, value) pairs in any order; they are stored `save_every` at a time in one write, so a killed
        run keeps what it finished and a re-run computes only the rest. `encode` turns a computed value into
        what is stored (None: not stored, e.g. a transient failure), `decode` a stored one back. An exception
        from `compute` propagates after what it already yielded is stored."""
        found, stream = self.stream_or_compute(keys, compute, encode=encode, decode=decode, save_every=save_every)
        values: list[Any] = [None] * len(keys)
        for indexes, value in stream:
            for i in indexes:
                values[i] = value
        return Lookup(values, found, len(keys) - found)

    def stream_or_compute(self, keys: Sequence[CacheKey], compute: Callable[[list[int]], Iterable[tuple[int, Any]]], *,
                          encode: Callable[[Any], Any] = _same, decode: Callable[[Any], Any] = _same,
                          save_every: int = 1024) -> tuple[int, Iterator[tuple[list[int], Any]]]:
        """`get_or_compute` as a stream, for a caller that passes values on as they come instead of holding them
        all (an index build writing vectors while the next are embedded): (how many keys the cache holds, an
        iterator of (the indexes of the keys sharing a value, the value)), the stored values first, then each
        computed one as `compute` yields it, stored as `get_or_compute` stores them. The lookup and the hit
        accounting happen now; computing, when the iterator is read."""
        addresses = [k.address() for k in keys]
        sharing: dict[str, list[int]] = {}
        for i, (d, _) in enumerate(addresses):
            sharing.setdefault(d, []).append(i)
        distinct = [indexes[0] for indexes in sharing.values()]
        stored = self._read([addresses[i] for i in distinct], count=False)
        missing = [i for i, v in zip(distinct, stored) if v is None]
        found = len(addresses) - sum(len(sharing[addresses[i][0]]) for i in missing)  # per key: a repeat is a hit or a miss again
        self._count(found, len(addresses))

        def values() -> Iterator[tuple[list[int], Any]]:
            for i, v in zip(distinct, stored):
                if v is not None:
                    yield sharing[addresses[i][0]], decode(v)
            pending: list[tuple[tuple[str, str], Any]] = []
            try:
                for i, value in (compute(missing) if missing else ()):
                    pending.append((addresses[i], encode(value)))
                    if len(pending) >= save_every:
                        self._write(pending)
                        pending = []
                    yield sharing[addresses[i][0]], value
            finally:
                self._write(pending)

        return found, values()

    def evict(self, namespace: str) -> int:
        """Drop every entry of one namespace (e.g. to re-measure instead of reusing); returns how many."""
        self._memory = collections.OrderedDict((d, e) for d, e in self._memory.items() if not d.startswith(f"{namespace}:"))
        return self.store.delete_namespace(namespace)

    def stored_digests(self, namespace: str) -> set[str]:
        """The digests the store holds in one namespace now: a caller about to look up many keys that are mostly
        absent (a cold sweep's stage memo) asks the store only for those it holds."""
        return self.store.digests(namespace)

    def close(self) -> None:
        self.store.close()


def workspace_cache(workspace: str | Path) -> Cache:
    """The persistent cache of a workspace (its `cache/` folder): the one place that path is built."""
    return Cache(Path(workspace) / "cache")
