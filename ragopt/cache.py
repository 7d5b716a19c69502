"""One persistent cache (diskcache) with canonical, scoped keys and honest hit accounting.

Every key carries tenant, permission scopes, model, prompt version and knowledge-base version, even where a
value does not depend on some of them: a cache must never be the way one tenant's data reaches another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict

from ragopt.config import fingerprint


class CacheKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str  # "embedding", "answer", ...
    tenant: str | None = None
    scopes: tuple[str, ...] = ()
    model: str = ""  # a fingerprint of weights/config, never only a name
    prompt_version: str = ""
    kb_version: str = ""
    payload: Any = None  # what else decides the value: the text, the options

    def digest(self) -> str:
        data = self.model_dump(mode="json")
        data["scopes"] = sorted(set(data["scopes"]))
        return f"{self.namespace}:{fingerprint(data)}"


_MISSING = object()


class Cache:
    """A diskcache.Cache that counts cache hits and misses (cache_hits, cache_misses); `directory=None` keeps everything in memory."""

    def __init__(self, directory: str | Path | None):
        self.directory = Path(directory) if directory is not None else None
        self._store: Any
        if self.directory is None:
            self._store = {}
        else:
            import diskcache

            self.directory.mkdir(parents=True, exist_ok=True)
            self._store = diskcache.Cache(str(self.directory), size_limit=8 * 2**30)
        self.cache_hits = 0
        self.cache_misses = 0

    def get(self, key: CacheKey) -> Any:
        value = self._store.get(key.digest(), _MISSING)
        if value is _MISSING:
            self.cache_misses += 1
            return None
        self.cache_hits += 1
        return value

    def get_many(self, keys: Iterable[CacheKey]) -> list[Any]:
        return [self.get(k) for k in keys]

    def set(self, key: CacheKey, value: Any) -> None:
        self._store[key.digest()] = value

    def set_many(self, items: Iterable[tuple[CacheKey, Any]]) -> None:
        if self.directory is None:
            for k, v in items:
                self._store[k.digest()] = v
            return
        with self._store.transact():  # one SQLite transaction instead of one per key
            for k, v in items:
                self._store[k.digest()] = v

    def evict(self, namespace: str) -> int:
        """Drop every entry of one namespace (e.g. to re-measure instead of reusing); returns how many."""
        prefix = f"{namespace}:"
        doomed = [k for k in list(self._store.keys() if self.directory is None else self._store.iterkeys()) if str(k).startswith(prefix)]
        for k in doomed:
            del self._store[k]
        return len(doomed)

    def close(self) -> None:
        if self.directory is not None:
            self._store.close()
