"""The models, clients and open indexes a process holds, in one explicit object instead of module globals.

Each item is keyed by its kind and its full config (a path alone is not enough: the same model file on
another device or with other context settings is another item), created on first use by the factory the
caller passes, and released by `close()`. Nothing here changes environment variables or global thread
counts: a local model is loaded with `local_files_only`, so it never reaches for a hub.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Hashable, TypeVar

T = TypeVar("T")


def _closer(obj: Any) -> Callable[[], None] | None:
    close = getattr(obj, "close", None)
    return close if callable(close) else None


class Resources:
    """`resources.get(("cross-encoder", path, device), lambda: CrossEncoder(...))`; `close()` when done.

    Usable as a context manager. Thread-safe: two requests asking for the same model load it once."""

    def __init__(self) -> None:
        self._items: dict[Hashable, Any] = {}
        self._lock = threading.RLock()

    def get(self, key: Hashable, factory: Callable[[], T]) -> T:
        with self._lock:
            if key not in self._items:
                self._items[key] = factory()
            return self._items[key]

    def drop(self, key: Hashable) -> None:
        """Release one item (e.g. a local Qdrant folder about to be renamed)."""
        with self._lock:
            item = self._items.pop(key, None)
        close = _closer(item)
        if close is not None:
            close()

    def sentence_transformer(self, path: str, device: str = "cpu") -> Any:
        """A SentenceTransformer by local path or hub name; a local path never touches a hub."""

        def load() -> Any:
            from sentence_transformers import SentenceTransformer

            return SentenceTransformer(path, device=device, local_files_only=Path(path).exists())

        return self.get(("sentence-transformer", path, device), load)

    def cross_encoder(self, path: str, max_length: int, device: str = "cpu") -> Any:
        """A sentence-transformers CrossEncoder by local path or hub name."""

        def load() -> Any:
            from sentence_transformers import CrossEncoder

            return CrossEncoder(path, max_length=max_length, device=device, local_files_only=Path(path).exists())

        return self.get(("cross-encoder", path, max_length, device), load)

    def close(self) -> None:
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
        for item in reversed(items):  # indexes before the clients they use
            close = _closer(item)
            if close is not None:
                close()

    def __enter__(self) -> "Resources":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
