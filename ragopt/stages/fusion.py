"""Pipeline stage: fuse the candidate lists of the retrievers before it into one ranking of top_k hits."""

from __future__ import annotations

from ragopt.config import FusionConfig
from ragopt.fusion import convex, rrf
from ragopt.pipeline import RequestState
from ragopt.types import Hit


class Fuse:
    """Fuses the lists of the retriever stages named in `inputs` (candidates are keyed by stage name);
    convex fusion weighs the first input (the dense one) by alpha and the second by 1 - alpha."""

    name = "fuse"
    writes = ("hits",)
    span_kind = "RETRIEVER"  # OpenInference's word for it (ragopt.trace.Span.kind)

    def __init__(self, config: FusionConfig | None = None, k: int = 10, inputs: tuple[str, ...] = ("vector", "bm25")):
        self.config = config or FusionConfig()
        self.k = k
        self.inputs = tuple(inputs)
        if self.config.method == "convex" and len(self.inputs) != 2:
            raise ValueError(f"convex fusion combines exactly two retrievers, got {list(self.inputs)}")
        self.reads = tuple(f"candidates.{n}" for n in self.inputs)

    def identity(self) -> dict[str, object]:
        return {"stage": "fuse", "fusion": self.config.model_dump(mode="json"), "k": self.k, "inputs": list(self.inputs)}

    def run(self, state: RequestState) -> RequestState:
        lists = [state.candidates[n] for n in self.inputs]
        chunks = {h.chunk.id: h.chunk for hits in lists for h in hits}
        rankings = [[(h.chunk.id, h.score) for h in hits] for hits in lists]
        if self.config.method == "rrf":
            fused = rrf(rankings, rrf_k=self.config.rrf_k)
        else:
            dense, keyword = rankings
            fused = convex(dense, keyword, alpha=self.config.alpha, norm=self.config.norm)  # alpha weighs dense
        label = self.config.method
        state.hits = [
            Hit.model_construct(chunk=chunks[cid], score=score, rank=r, retriever=label)  # its inputs' chunks: valid
            for r, (cid, score) in enumerate(fused[: self.k], start=1)
        ]
        return state
