"""The stage memo (ragopt.memo): a stage run is remembered by what it read and given back instead of running again,
never when what it read has changed; candidate lists are keyed by the run that wrote them while the request holds
that very list; a new process reads back what an earlier one flushed to disk."""

from __future__ import annotations

import time
from pathlib import Path

from ragopt.cache import Cache
from ragopt.config import FusionConfig
from ragopt.memo import StageMemo
from ragopt.pipeline import Pipeline, RequestState
from ragopt.stages.fusion import Fuse
from ragopt.types import Chunk, Hit, Query

TEXTS = [f"Passage {i} says the ward opens at {i} o'clock." for i in range(60)]


class Retriever:
    """A retriever over TEXTS with a fixed order per name: counts its runs."""

    reads = ("query",)

    def __init__(self, name: str, step: int):
        self.name, self.step, self.runs = name, step, 0
        self.writes = (f"candidates.{name}", "hits")

    def identity(self) -> dict[str, object]:
        return {"stage": "test-retriever", "name": self.name, "step": self.step}

    def run(self, state: RequestState) -> RequestState:
        self.runs += 1
        order = sorted(range(len(TEXTS)), key=lambda i: (i * self.step) % len(TEXTS))
        hits = [Hit(chunk=Chunk(id=f"c{i}", doc_id=f"d{i}", start=0, end=len(TEXTS[i]), text=TEXTS[i]),
                    score=1.0 / r, rank=r, retriever=self.name) for r, i in enumerate(order, start=1)]
        state.candidates[self.name] = state.hits = hits
        return state


class Reverse:
    """Not remembered (no identity): replaces one candidate list with a new, reversed one."""

    reads = ("query",)
    name = "reverse"

    def __init__(self, target: str):
        self.target = target
        self.writes = (f"candidates.{target}",)

    def run(self, state: RequestState) -> RequestState:
        state.candidates[self.target] = [h.model_copy(update={"rank": r}) for r, h in
                                         enumerate(reversed(state.candidates[self.target]), start=1)]
        return state


class CountedFuse(Fuse):
    runs = 0

    def run(self, state: RequestState) -> RequestState:
        type(self).runs += 1
        return super().run(state)


def fused_ids(pipeline: Pipeline, text: str = "when does the ward open") -> list[str]:
    return [h.chunk.id for h in pipeline.run(Query(text=text)).state.hits]


def test_a_repeated_request_is_given_back_without_running_its_stages() -> None:
    dense, keyword, fuse = Retriever("vector", 7), Retriever("bm25", 11), CountedFuse(FusionConfig(), k=5)
    CountedFuse.runs = 0
    pipeline = Pipeline([dense, keyword, fuse], memo=StageMemo())
    first = fused_ids(pipeline)
    again = fused_ids(pipeline)
    assert again == first and len(first) == 5
    assert (dense.runs, keyword.runs, CountedFuse.runs) == (1, 1, 1)
    other = fused_ids(pipeline, "who staffs the ward")
    assert (dense.runs, keyword.runs, CountedFuse.runs) == (2, 2, 2) and len(other) == 5


def test_a_candidate_list_replaced_by_a_stage_that_is_not_remembered_is_keyed_by_its_content() -> None:
    """The fusion reads the retriever's list by the retriever's key only while the request holds that list: after
    a stage without a memo rewrote it, the fusion runs again on what it now holds."""
    memo = StageMemo()
    CountedFuse.runs = 0
    plain = Pipeline([Retriever("vector", 7), Retriever("bm25", 11), CountedFuse(FusionConfig(), k=5)], memo=memo)
    rewritten = Pipeline([Retriever("vector", 7), Retriever("bm25", 11), Reverse("bm25"), CountedFuse(FusionConfig(), k=5)],
                         memo=memo)
    unmemoized = Pipeline([Retriever("vector", 7), Retriever("bm25", 11), Reverse("bm25"), Fuse(FusionConfig(), k=5)])
    assert fused_ids(rewritten) == fused_ids(unmemoized) != fused_ids(plain)
    assert CountedFuse.runs == 2


def test_a_new_process_reads_back_what_an_earlier_one_flushed(tmp_path: Path) -> None:
    def pipeline(cache: Cache) -> tuple[Pipeline, Retriever]:
        dense = Retriever("vector", 7)
        memo = StageMemo(cache, disk_min_ms=0.0)  # these stages take microseconds
        return Pipeline([dense, Retriever("bm25", 11), Fuse(FusionConfig(method="convex"), k=5)], memo=memo), dense

    first, dense = pipeline(Cache(tmp_path / "cache"))
    ids = fused_ids(first)
    first.memo.flush()
    first.memo.cache.close()
    second, dense_again = pipeline(Cache(tmp_path / "cache"))
    result = second.run(Query(text="when does the ward open"))
    assert [h.chunk.id for h in result.state.hits] == ids and dense_again.runs == 0
    assert {s.name: s.usage.attrs["memo"] for s in result.trace.spans} == {"vector": "disk", "bm25": "disk", "fuse": "disk"}


class SlowRetriever(Retriever):
    def run(self, state: RequestState) -> RequestState:
        time.sleep(0.005)
        return super().run(state)


def test_only_a_run_slower_than_writing_it_is_written_to_disk(tmp_path: Path) -> None:
    """A run quicker than DISK_MIN_MS is run again by the next process; a slower one is read back."""
    def pipeline(cache: Cache) -> tuple[Pipeline, Retriever, Retriever]:
        quick, slow = Retriever("vector", 7), SlowRetriever("bm25", 11)
        return Pipeline([quick, slow, Fuse(FusionConfig(), k=5)], memo=StageMemo(cache)), quick, slow

    first, _, _ = pipeline(Cache(tmp_path / "cache"))
    ids = fused_ids(first)
    first.memo.flush()
    first.memo.cache.close()
    second, quick, slow = pipeline(Cache(tmp_path / "cache"))
    assert fused_ids(second) == ids and (quick.runs, slow.runs) == (1, 0)
