"""Keyword retrieval stage: BM25 (ragopt/backends/bm25.py) over the chunks the query may see."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from ragopt.backends.bm25 import BM25Index
from ragopt.config import BM25Config
from ragopt.pipeline import RequestState

if TYPE_CHECKING:
    from ragopt.index import Index


class KeywordSearch:
    """Pipeline stage: BM25 over the chunks the query may see."""

    reads = ("query",)
    span_kind = "RETRIEVER"  # OpenInference's word for it (ragopt.trace.Span.kind)

    def __init__(self, index: "Index", config: BM25Config | None = None, k: int = 10, name: str = "bm25"):
        self.name = name
        self.writes = (f"candidates.{name}", "hits")
        self.index = index
        self.config = config or BM25Config()
        self.k = k

    def identity(self) -> dict[str, object]:
        return {"stage": "bm25", "name": self.name, "index": self.index.manifest.id,
                "bm25": self.config.model_dump(mode="json"), "analyzer": self.index.analyzer(self.config).fingerprint,
                "k": self.k}

    def warm(self) -> None:
        self.bm25  # built before the first request is timed, and only when a request needs it

    @cached_property
    def bm25(self) -> BM25Index:
        return self.index.keyword(self.config)

    def run(self, state: RequestState) -> RequestState:
        found = self.bm25.search(state.query.text, self.k, self.index.allowed_mask(state.query))
        state.candidates[self.name] = state.hits = self.index.hits(found, self.name)
        return state
