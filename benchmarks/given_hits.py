"""A stage that stands in for retrieval with passages fixed in advance, so a benchmark's arms answer from the
same prompt (shared by the benchmarks that compare generation settings)."""

from __future__ import annotations

from ragopt.pipeline import RequestState
from ragopt.types import Hit


class Given:
    """Writes the same hits for every request."""

    name = "retrieve"
    reads: tuple[str, ...] = ()
    writes = ("hits",)

    def __init__(self, hits: list[Hit]):
        self.hits = hits

    def run(self, state: RequestState) -> RequestState:
        state.hits = list(self.hits)
        return state
