"""A reranker that needs no training: sentence-level maximum similarity with the cached embedder.

A passage's score is the best cosine similarity between the query and any one of its sentences (its
title counts as a sentence), so a long abstract with one sentence on point is not diluted by the rest, as
it is in a single passage vector. Sentence vectors go through `Embedder.encode`, cached per text and
owner, so a corpus's sentences are embedded once; the score is then fused with the fused rank, since
sentence similarity alone loses what BM25 and the passage vector knew.
"""

from __future__ import annotations

import numpy as np

from ragopt.backends.exact_store import unit_vectors
from ragopt.config import StrictModel, knob
from ragopt.pipeline import RequestState
from ragopt.backends.embeddings import Embedder
from ragopt.stages.rerank import MAX_DEPTH, Fusion, record, reorder
from ragopt.stages.spec import BuildContext, StageSpec
from ragopt.text import sentences
from ragopt.types import Chunk


class MaxSimConfig(StrictModel):
    depth: int = knob(0, sweep=[0, 20, 50, 100], ge=0, le=MAX_DEPTH, description="fused candidates rescored; 0 = off")
    fusion: Fusion = knob("rrf", description="none: max-sim alone; rrf/convex: combined with the fused order")
    weight: float = knob(0.5, ge=0, le=1, description="convex fusion: weight of the max-sim score")
    rrf_k: int = knob(60, gt=0, description="RRF constant when fusion is rrf")


def passage_sentences(chunk: Chunk) -> list[str]:
    return ([chunk.title] if chunk.title else []) + sentences(chunk.text)


class MaxSimRerank:
    """Pipeline stage: reorder the top `depth` hits by their best query-sentence similarity."""

    reads = ("hits", "query")
    span_kind = "RERANKER"  # OpenInference's word for it (ragopt.trace.Span.kind)
    writes = ("hits",)

    def __init__(self, embedder: Embedder, config: MaxSimConfig | None = None, name: str = "rerank_maxsim"):
        self.embedder = embedder
        self.config = config or MaxSimConfig()
        self.name = name

    def scores(self, state: RequestState, chunks: list[Chunk]) -> tuple[list[float], int, int]:
        """Max-sim per chunk, and (cache hits, misses) of the sentence and query vectors."""
        q = state.query
        per_chunk = [passage_sentences(c) for c in chunks]
        texts = [s for ss in per_chunk for s in ss]
        owners = [(c.tenant, c.scopes) for c, ss in zip(chunks, per_chunk) for _ in ss]
        query = self.embedder.encode([q.text], [(q.tenant, q.scopes)], role="query")
        encoded = self.embedder.encode(texts, owners)
        vectors = np.vstack([query.vectors, encoded.vectors]) if texts else query.vectors
        if not self.embedder.config.normalize:  # cosine needs unit vectors
            vectors = unit_vectors(vectors)
        sims = vectors[1:] @ vectors[0]
        out, i = [], 0
        for ss in per_chunk:
            out.append(float(sims[i : i + len(ss)].max()) if ss else float("-inf"))
            i += len(ss)
        return out, query.cache_hits + encoded.cache_hits, query.cache_misses + encoded.cache_misses

    def run(self, state: RequestState) -> RequestState:
        c = self.config
        candidates = state.hits[: c.depth]
        if not candidates:
            record(state, [], 0, False)
            return state
        scores, cache_hits, cache_misses = self.scores(state, [h.chunk for h in candidates])
        state.usage.cache_hits += cache_hits
        state.usage.cache_misses += cache_misses
        state.hits = reorder(state.hits, scores, c.fusion, c.weight, c.rrf_k, self.name)
        record(state, candidates, len(scores), False)
        return state


def _build(config: MaxSimConfig, ctx: BuildContext) -> MaxSimRerank | None:
    return MaxSimRerank(ctx.embedder, config) if config.depth else None


SPEC = StageSpec("rerank_maxsim", MaxSimConfig, _build, slot="rerank", wants=lambda config: config.depth, skippable=True)
