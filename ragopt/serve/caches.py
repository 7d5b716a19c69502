"""The service's answer and retrieval caches: diskcache on one machine, Redis shared by several processes.

Keys are `ragopt.cache.CacheKey`s and always carry the tenant, the permission scopes (hashed, order-free),
the normalized question, the model fingerprint, the prompt version and the knowledge-base version (the
index fingerprint): a hit can only ever be the same question asked by the same tenant with the same scopes
of the same knowledge base and model. The stored value repeats its key's identity and a read checks it
(a digest collision or a mis-keyed write is a miss, never another tenant's answer). Requests marked
personal or real-time are never read from or written to a cache. Entries expire after `ttl_s`.
"""

from __future__ import annotations

import json
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ragopt.cache import CacheKey


def normalize_question(text: str) -> str:
    """The same question however it was typed: Unicode NFKC, case-folded, whitespace collapsed, no
    trailing punctuation or spaces."""
    text = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return text.rstrip(" ?!.")


class Store(Protocol):
    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str, ttl_s: float) -> None: ...

    def close(self) -> None: ...


class DiskStore:
    """diskcache with per-entry expiry; safe for several processes on one machine."""

    def __init__(self, directory: str | Path):
        import diskcache

        Path(directory).mkdir(parents=True, exist_ok=True)
        self._cache = diskcache.Cache(str(directory), size_limit=2 * 2**30)

    def get(self, key: str) -> str | None:
        value = self._cache.get(key)
        return None if value is None else str(value)

    def set(self, key: str, value: str, ttl_s: float) -> None:
        self._cache.set(key, value, expire=ttl_s)

    def close(self) -> None:
        self._cache.close()


class RedisStore:
    """Redis (`redis://host:port/db`): shared by every `ragopt serve` process pointed at it."""

    def __init__(self, url: str, prefix: str = "ragopt:cache:"):
        import redis

        self._redis = redis.Redis.from_url(url, decode_responses=True)
        self.prefix = prefix

    def get(self, key: str) -> str | None:
        value = self._redis.get(self.prefix + key)
        return None if value is None else str(value)

    def set(self, key: str, value: str, ttl_s: float) -> None:
        self._redis.set(self.prefix + key, value, px=max(int(ttl_s * 1000), 1))

    def close(self) -> None:
        self._redis.close()


def open_store(redis_url: str | None, directory: str | Path) -> Store:
    return RedisStore(redis_url) if redis_url else DiskStore(directory)


@dataclass(frozen=True)
class CacheScope:
    """Who asks and against what: the parts of every key besides the question."""

    tenant: str | None
    scopes: tuple[str, ...]
    model: str  # a fingerprint of the generator (weights + settings) or of the retrieval config
    prompt_version: str
    kb_version: str  # the index fingerprint


class ScopedCache:
    """One namespace ("answer", "retrieval") of JSON values over a Store, with counted hits and misses."""

    def __init__(self, store: Store, namespace: str, ttl_s: float):
        self.store = store
        self.namespace = namespace
        self.ttl_s = ttl_s
        self.cache_hits = 0
        self.cache_misses = 0

    def key(self, scope: CacheScope, question: str, options: Any = None) -> CacheKey:
        return CacheKey(
            namespace=self.namespace,
            tenant=scope.tenant,
            scopes=tuple(sorted(set(scope.scopes))),
            model=scope.model,
            prompt_version=scope.prompt_version,
            kb_version=scope.kb_version,
            payload={"question": normalize_question(question), "options": options},
        )

    @staticmethod
    def _identity(key: CacheKey) -> dict[str, Any]:
        data = key.model_dump(mode="json")
        data["scopes"] = sorted(set(data["scopes"]))
        return data

    def get(self, scope: CacheScope, question: str, options: Any = None) -> Any:
        key = self.key(scope, question, options)
        raw = self.store.get(key.digest())
        if raw is not None:
            entry = json.loads(raw)
            if entry.get("key") == self._identity(key):
                self.cache_hits += 1
                return entry["value"]
        self.cache_misses += 1
        return None

    def set(self, scope: CacheScope, question: str, value: Any, options: Any = None) -> None:
        key = self.key(scope, question, options)
        entry = {"key": self._identity(key), "value": value, "stored_at": time.time()}
        self.store.set(key.digest(), json.dumps(entry, separators=(",", ":")), self.ttl_s)


class ServeCaches:
    """The answer cache and the retrieval cache of one service, on one store."""

    def __init__(self, store: Store, answer_ttl_s: float = 3600.0, retrieval_ttl_s: float = 3600.0, enabled: bool = True):
        self.store = store
        self.enabled = enabled
        self.answers = ScopedCache(store, "answer", answer_ttl_s)
        self.retrieval = ScopedCache(store, "retrieval", retrieval_ttl_s)

    @staticmethod
    def cacheable(personal: bool, realtime: bool) -> bool:
        """Personal answers depend on more than the key says; real-time ones must be fresh: never cached."""
        return not (personal or realtime)

    def close(self) -> None:
        self.store.close()
