"""The service's answer and retrieval caches, on ragopt's one cache (ragopt/cache.py): a bounded memory in front
of diskcache on one machine (`DiskStore`) or of Redis shared by several processes (`RedisStore`).

Keys are `ragopt.cache.CacheKey`s and always carry the tenant, the permission scopes (hashed, order-free),
the normalized question, the model fingerprint, the prompt version and the knowledge-base version (the
index fingerprint): a hit can only ever be the same question asked by the same tenant with the same scopes
of the same knowledge base and model. Every entry carries a second hash of its key's identity and a read
checks it (a digest collision or a mis-keyed write is a miss, never another tenant's answer). Requests marked
personal or real-time are never read from or written to a cache. Entries expire after `ttl_s`.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from ragopt.cache import Cache, CacheKey, Store


def normalize_question(text: str) -> str:
    """The same question however it was typed: Unicode NFKC, case-folded, whitespace collapsed, no
    trailing punctuation or spaces."""
    text = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return text.rstrip(" ?!.")


@dataclass(frozen=True)
class CacheScope:
    """Who asks and against what: the parts of every key besides the question."""

    tenant: str | None
    scopes: tuple[str, ...]
    model: str  # a fingerprint of the generator (weights + settings) or of the retrieval config
    prompt_version: str
    kb_version: str  # the index fingerprint


class ScopedCache:
    """One namespace ("answer", "retrieval") of JSON values: a `ragopt.cache.Cache` over the service's store,
    with its own hit accounting and expiry."""

    def __init__(self, store: Store, namespace: str, ttl_s: float):
        self.namespace = namespace
        self.cache = Cache(store=store, ttl_s=ttl_s)

    @property
    def cache_hits(self) -> int:
        return self.cache.cache_hits

    @property
    def cache_misses(self) -> int:
        return self.cache.cache_misses

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

    def get(self, scope: CacheScope, question: str, options: Any = None) -> Any:
        return self.cache.get(self.key(scope, question, options))

    def set(self, scope: CacheScope, question: str, value: Any, options: Any = None) -> None:
        self.cache.set(self.key(scope, question, options), value)


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
