"""The store interface every vector engine implements: `exact_store.ExactStore` (numpy, exact, the default
embedded store, in the index folder) and `qdrant_store.QdrantStore` (a Qdrant server by URL). Which one an
index uses is recorded in its manifest (ragopt/index/manifest.py)."""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from ragopt.types import Chunk, Query


class VectorStore(Protocol):
    engine: str  # a short name: "numpy-exact", "qdrant"

    def create(self, dim: int) -> None: ...

    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray, first_index: int = 0) -> None:
        """Vectors of the chunks at positions first_index.. (idempotent)."""

    def search(self, vector: np.ndarray, k: int, query: Query | None) -> list[tuple[int, float]]:
        """(chunk position, cosine) of the k best chunks `query` may see (None: unrestricted), best first,
        ties by position."""
        ...

    def count(self) -> int: ...

    def close(self) -> None: ...
