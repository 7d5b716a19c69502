"""Pipeline stage: keep the best `k` hits. A reranker scores more candidates than the plan hands on (its
depth); this cuts the list back to the plan's top_k after it."""

from __future__ import annotations

from ragopt.pipeline import RequestState


class KeepTop:
    reads = ("hits",)
    writes = ("hits",)

    def __init__(self, k: int, name: str = "keep_top"):
        self.k = k
        self.name = name

    def identity(self) -> dict[str, object]:
        return {"stage": "keep_top", "k": self.k}

    def run(self, state: RequestState) -> RequestState:
        state.hits = state.hits[: self.k]
        return state
