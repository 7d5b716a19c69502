"""Vector retrieval stage: nearest chunks from the index's vector store (ragopt/backends/vector_store.py).

The stage is the same over every engine; which one an index uses is recorded in its manifest (ragopt/index/manifest.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragopt.pipeline import RequestState

if TYPE_CHECKING:
    from ragopt.index import Index


class VectorSearch:
    """Pipeline stage: nearest chunks to `state.query_vector`, filtered by the query's permissions."""

    reads = ("query_vector",)
    span_kind = "RETRIEVER"  # OpenInference's word for it (ragopt.trace.Span.kind)

    def __init__(self, index: "Index", k: int = 10, name: str = "vector"):
        self.index = index
        self.k = k
        self.name = name
        self.writes = (f"candidates.{name}", "hits")

    def identity(self) -> dict[str, object]:
        identity: dict[str, object] = {"stage": "vector", "name": self.name, "index": self.index.manifest.id, "k": self.k}
        if self.index.manifest.store == "qdrant-edge":  # an approximate search: its settings change the answer
            identity["search"] = self.index.store_config.search_settings()
        return identity

    def run(self, state: RequestState) -> RequestState:
        if state.query_vector is None:
            raise ValueError("vector search needs a query vector: put an EmbedQuery stage before it")
        flt = self.index.permission_query(state.query)
        found = self.index.store.search(state.query_vector, self.k, flt)
        state.candidates[self.name] = state.hits = self.index.hits(found, self.name)
        return state
