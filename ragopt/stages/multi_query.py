"""Multi-query retrieval: the retrieval stages run once per query variant, and the lists are fused with RRF.

The retrieval stages are not changed: they run as a sub-pipeline (`Pipeline(stages).run_state`) on a copy of
the request whose query text is the variant (tenant, scopes and deadline unchanged, so no variant sees more
than the query may). Fusion is reciprocal rank fusion (`ragopt.fusion.rrf`), ties broken by chunk id so the
order never depends on which variant came first.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from ragopt.fusion import rrf
from ragopt.pipeline import Pipeline, RequestState, Stage
from ragopt.trace import Usage
from ragopt.types import Hit, Query


class Rewriter(Protocol):
    """What multi-query retrieval asks of a rewriter (ragopt.stages.rewrite.QueryRewrite in mode "multi")."""

    config: Any

    def rewrite(self, query: Query, timeout_s: float | None = None) -> Any: ...

    def report(self, usage: Usage, original: str, result: Any) -> None: ...


class MultiQueryRetrieve:
    """Rewrites the query (a `Rewriter`), retrieves for each variant, fuses the hit lists.

    Writes the rewritten query (the first variant), the fused `hits` (as many as the longest list, or `k`),
    and the first variant's query vector when the retrieval computes one."""

    reads = ("query",)
    span_kind = "RETRIEVER"  # OpenInference's word for it (ragopt.trace.Span.kind)

    def __init__(self, rewriter: Rewriter, retrieval: Sequence[Stage], *, rrf_k: int = 60, k: int | None = None,
                 name: str = "multi_retrieve"):
        self.rewriter = rewriter
        self.config = rewriter.config
        self.pipeline = Pipeline(retrieval)
        self.rrf_k = rrf_k
        self.k = k
        self.name = name
        self.retrieval = list(retrieval)
        inner = {w for s in retrieval for w in s.writes}
        self.writes = ("query", "hits") + (("query_vector",) if "query_vector" in inner else ())

    def identity(self) -> dict[str, object]:
        from ragopt.memo import stage_identity

        return {"stage": "multi-query", "rewrite": self.config.model_dump(mode="json"), "rrf_k": self.rrf_k, "k": self.k,
                "retrieval": [stage_identity(s) for s in self.retrieval]}

    def run(self, state: RequestState) -> RequestState:
        original = state.query
        result = self.rewriter.rewrite(original, timeout_s=state.remaining_s())
        lists: list[list[Hit]] = []
        vector = None
        variant_ms = []
        for i, text in enumerate(result.variants):
            sub = RequestState(query=original.model_copy(update={"text": text}), deadline=state.deadline)
            done = self.pipeline.run_state(sub)
            lists.append(done.state.hits)
            variant_ms.append(round(done.trace.total_ms, 3))
            for span in done.trace.spans:
                state.usage.cache_hits += span.usage.cache_hits
                state.usage.cache_misses += span.usage.cache_misses
            if i == 0:
                vector = done.state.query_vector
        state.query = original.model_copy(update={"text": result.text})
        state.query_vector = vector
        state.hits = fuse(lists, self.rrf_k, self.k)
        self.rewriter.report(state.usage, original.text, result)
        state.usage.attrs["variant_ms"] = variant_ms
        return state


def fuse(lists: Sequence[Sequence[Hit]], rrf_k: int = 60, k: int | None = None) -> list[Hit]:
    """RRF over hit lists, best first, ties broken by chunk id; `k` defaults to the longest list's length."""
    if len(lists) == 1:
        return list(lists[0])[:k] if k is not None else list(lists[0])
    chunks = {h.chunk.id: h.chunk for hits in lists for h in hits}
    fused = sorted(rrf([[(h.chunk.id, h.score) for h in hits] for hits in lists], rrf_k=rrf_k), key=lambda kv: (-kv[1], kv[0]))
    k = max((len(hits) for hits in lists), default=0) if k is None else k
    return [Hit(chunk=chunks[cid], score=score, rank=r, retriever="multi-rrf") for r, (cid, score) in enumerate(fused[:k], start=1)]

