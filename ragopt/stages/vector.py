"""Vector retrieval: the store interface every vector engine implements, and the VectorSearch stage.

Engines live in ragopt/backends: `exact_store.ExactStore` (numpy, exact, the default embedded store, in the
index folder) and `qdrant_store.QdrantStore` (a Qdrant server by URL). The stage above them is the same;
which one an index uses is recorded in its manifest (ragopt/index.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

from ragopt.pipeline import RequestState
from ragopt.types import Chunk, Query

if TYPE_CHECKING:
    from ragopt.index import Index


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


class VectorSearch:
    """Pipeline stage: nearest chunks to `state.query_vector`, filtered by the query's permissions."""

    reads = ("query_vector",)

    def __init__(self, index: "Index", k: int = 10, name: str = "vector"):
        self.index = index
        self.k = k
        self.name = name
        self.writes = (f"candidates.{name}", "hits")

    def identity(self) -> dict[str, object]:
        return {"stage": "vector", "name": self.name, "index": self.index.manifest.id, "k": self.k}

    def run(self, state: RequestState) -> RequestState:
        if state.query_vector is None:
            raise ValueError("vector search needs a query vector: put an EmbedQuery stage before it")
        flt = self.index.permission_query(state.query)
        found = self.index.store.search(state.query_vector, self.k, flt)
        state.candidates[self.name] = state.hits = self.index.hits(found, self.name)
        return state
