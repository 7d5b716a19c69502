"""Pipeline stage: fuse the candidate lists of the retrievers before it into one ranking of top_k hits."""

from __future__ import annotations

from ragopt.config import FusionConfig
from ragopt.fusion import convex, rrf
from ragopt.pipeline import RequestState
from ragopt.types import Hit


class Fuse:
    name = "fuse"

    def __init__(self, config: FusionConfig | None = None, k: int = 10):
        self.config = config or FusionConfig()
        self.k = k

    def run(self, state: RequestState) -> RequestState:
        lists = list(state.candidates.values())
        if not lists:
            raise ValueError("fusion needs candidates: put retrieval stages before it")
        chunks = {h.chunk.id: h.chunk for hits in lists for h in hits}
        rankings = [[(h.chunk.id, h.score) for h in hits] for hits in lists]
        if self.config.method == "rrf":
            fused = rrf(rankings, k=self.config.k)
        else:
            if set(state.candidates) != {"vector", "bm25"}:
                raise ValueError(f"convex fusion combines vector and bm25 candidates, got {sorted(state.candidates)}")
            dense, keyword = ([(h.chunk.id, h.score) for h in state.candidates[n]] for n in ("vector", "bm25"))
            fused = convex(dense, keyword, alpha=self.config.alpha, norm=self.config.norm)  # alpha weighs dense
        label = self.config.method
        state.hits = [
            Hit(chunk=chunks[cid], score=score, rank=r, retriever=label)
            for r, (cid, score) in enumerate(fused[: self.k], start=1)
        ]
        return state
