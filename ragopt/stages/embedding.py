"""The query-embedding stage over the cached embedder (ragopt/backends/embeddings.py)."""

from __future__ import annotations

from ragopt.backends.embeddings import Embedder
from ragopt.pipeline import RequestState


class EmbedQuery:
    """Pipeline stage: the query's vector, from the cache when this exact query was embedded before."""

    name = "embed"
    reads = ("query",)
    span_kind = "EMBEDDING"  # OpenInference's word for it (ragopt.trace.Span.kind)
    writes = ("query_vector",)

    def __init__(self, embedder: Embedder, use_cache: bool = True):
        self.embedder = embedder
        self.use_cache = use_cache  # False when measuring: every query pays for its encoding

    def identity(self) -> dict[str, object]:
        return {"stage": "embed", "model": self.embedder.fingerprint, "normalize": self.embedder.config.normalize}

    def warm(self) -> None:
        if not self.use_cache:  # a measured encode must not carry the model load
            self.embedder.model

    def run(self, state: RequestState) -> RequestState:
        q = state.query
        encoded = self.embedder.encode([q.text], [(q.tenant, q.scopes)], use_cache=self.use_cache, role="query")
        state.query_vector = encoded.vectors[0]
        state.usage.cache_hits += encoded.cache_hits
        state.usage.cache_misses += encoded.cache_misses
        return state

