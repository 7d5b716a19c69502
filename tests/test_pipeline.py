"""The pipeline core: one span per stage with items in/out and cache counts, visible degradation, deadlines.

The stages are the real retrieval stages over the tiny MiniLM index; `Broken` and `Slow` are faults injected
on purpose (a stage that raises, a stage that overruns the deadline).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from ragopt.config import FusionConfig
from ragopt.errors import WiringError
from ragopt.pipeline import Pipeline, RequestState, Stage, Step
from ragopt.stages.embedding import EmbedQuery
from ragopt.stages.fusion import Fuse
from ragopt.stages.keyword import KeywordSearch
from ragopt.stages.vector import VectorSearch


class Broken:
    """A fault: a stage that fails after touching nothing."""

    reads: tuple[str, ...] = ()
    writes = ("hits",)

    def __init__(self, name: str = "vector") -> None:
        self.name = name

    def run(self, state: RequestState) -> RequestState:
        raise RuntimeError("store unavailable")


class Slow:
    """A fault: a stage that takes `seconds`, whatever its deadline."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def __init__(self, seconds: float, name: str = "slow") -> None:
        self.name, self.seconds = name, seconds

    def run(self, state: RequestState) -> RequestState:
        time.sleep(self.seconds)
        return state


def hybrid(tiny_index: Any, depth: int = 8, k: int = 3) -> list[Any]:
    index, embedder = tiny_index
    return [EmbedQuery(embedder), VectorSearch(index, depth), KeywordSearch(index, k=depth), Fuse(FusionConfig(), k)]


def test_one_span_per_stage_with_items_and_cache_counts(tiny_index: Any) -> None:
    pipeline = Pipeline(hybrid(tiny_index))
    text = "What makes bread dough rise? (pipeline test)"  # a text embedded nowhere else in the suite
    first = pipeline.run(text)
    assert [s.name for s in first.trace.spans] == ["embed", "vector", "bm25", "fuse"]
    embed, vector, bm25, fuse = first.trace.spans
    assert (embed.items_in, embed.items_out) == (0, 0)
    assert (embed.usage.cache_hits, embed.usage.cache_misses) == (0, 1)
    assert (vector.items_in, vector.items_out) == (0, 8)
    assert (bm25.items_in, bm25.items_out) == (8, len(first.state.candidates["bm25"]))
    assert 0 < bm25.items_out <= 8
    assert (fuse.items_in, fuse.items_out) == (bm25.items_out, 3)
    assert all(s.ms >= 0 and s.error is None and not s.skipped for s in first.trace.spans)
    starts = [s.start_ms for s in first.trace.spans]
    assert starts == sorted(starts)
    assert first.trace.total_ms >= sum(s.ms for s in first.trace.spans)
    assert first.hits[0].chunk.doc_id == "d5" and [h.rank for h in first.hits] == [1, 2, 3]
    assert first.trace.degraded == []
    assert [s.kind for s in first.trace.spans] == ["EMBEDDING", "RETRIEVER", "RETRIEVER", "RETRIEVER"]  # as declared

    second = pipeline.run(text)
    assert (second.trace.spans[0].usage.cache_hits, second.trace.spans[0].usage.cache_misses) == (1, 0)
    assert second.trace.request_id != first.trace.request_id


def test_a_failing_stage_with_a_fallback_is_visible(tiny_index: Any) -> None:
    index, embedder = tiny_index
    pipeline = Pipeline([EmbedQuery(embedder), Step(Broken("vector"), fallback=KeywordSearch(index, k=5))])
    result = pipeline.run("Who lays the eggs in a bee hive?")
    assert result.trace.degraded == ["vector: RuntimeError: store unavailable -> bm25"]
    failed, fallback = result.trace.spans[1:]
    assert failed.name == "vector" and failed.error == "RuntimeError: store unavailable"
    assert fallback.name == "vector.fallback" and fallback.error is None and fallback.items_out == len(result.hits)
    assert (failed.kind, fallback.kind) == ("CHAIN", "RETRIEVER")  # a fault declares no kind; BM25 does
    assert result.hits and result.hits[0].chunk.doc_id == "d3" and result.hits[0].retriever == "bm25"


def test_a_failing_optional_stage_is_skipped_visibly(tiny_index: Any) -> None:
    index, _ = tiny_index
    pipeline = Pipeline([KeywordSearch(index, k=4), Step(Broken("rerank"), required=False)])
    result = pipeline.run("What causes ocean tides?")
    assert result.trace.degraded == ["rerank: RuntimeError: store unavailable -> skipped"]
    assert result.trace.span("rerank").error == "RuntimeError: store unavailable"  # type: ignore[union-attr]
    assert result.hits[0].chunk.doc_id == "d6"  # the ranking before the failed stage survives


def test_a_failing_required_stage_raises(tiny_index: Any) -> None:
    index, _ = tiny_index
    with pytest.raises(RuntimeError, match="store unavailable"):
        Pipeline([KeywordSearch(index, k=4), Broken("rerank")]).run("tides")


def test_deadline_skips_later_stages_and_runs_their_fallback(tiny_index: Any) -> None:
    index, _ = tiny_index
    pipeline = Pipeline([
        Slow(0.05),
        Step(KeywordSearch(index, k=4), required=False),
        Step(Broken("generate"), fallback=KeywordSearch(index, k=2)),
    ])  # fmt: skip
    result = pipeline.run("What causes ocean tides?", deadline_s=0.01)
    slow, bm25, gen, fallback = result.trace.spans
    assert slow.ms >= 50 and not slow.skipped  # a stage is never interrupted, only the next one is not started
    assert bm25.name == "bm25" and bm25.skipped and bm25.error == "deadline" and bm25.ms == 0
    assert gen.name == "generate" and gen.skipped
    assert fallback.name == "generate.fallback" and not fallback.skipped  # it runs in the deadline's place
    assert result.trace.degraded == ["bm25: skipped, deadline passed", "generate: deadline passed -> bm25"]
    assert [h.chunk.doc_id for h in result.hits][:1] == ["d6"] and len(result.hits) <= 2

    relaxed = pipeline.run("What causes ocean tides?", deadline_s=30)
    assert relaxed.trace.span("bm25").skipped is False  # type: ignore[union-attr]
    assert relaxed.trace.degraded == ["generate: RuntimeError: store unavailable -> bm25"]


def test_stage_names_must_be_unique_and_stages_satisfy_the_protocol(tiny_index: Any) -> None:
    index, _ = tiny_index
    assert isinstance(KeywordSearch(index), Stage) and isinstance(Fuse(), Stage)
    with pytest.raises(ValueError, match="unique"):
        Pipeline([KeywordSearch(index), KeywordSearch(index)])


def test_a_wiring_mistake_fails_at_construction_naming_both_stages(tiny_index: Any) -> None:
    index, embedder = tiny_index
    with pytest.raises(WiringError, match="'vector' reads 'query_vector'.*no stage"):
        Pipeline([VectorSearch(index)])
    with pytest.raises(WiringError, match="'vector' reads 'query_vector'.*'embed' writes it but comes after 'vector'"):
        Pipeline([VectorSearch(index), EmbedQuery(embedder)])
    with pytest.raises(WiringError, match="'fuse' reads 'candidates.vector'"):
        Pipeline([KeywordSearch(index), Fuse()])  # fusion names its inputs by stage name
    with pytest.raises(WiringError, match="'generate.fallback'|'vector' reads"):  # a fallback must fit the same place
        Pipeline([KeywordSearch(index), Step(Broken("generate"), fallback=VectorSearch(index))])
    Pipeline([VectorSearch(index)], inputs=("query", "query_vector"))  # a state prepared by other stages


class Route:
    """Routes every request to `route` (the generate stage's RouteQuestion does it by the question's words)."""

    name, reads, writes = "route", ("query",), ("route",)

    def __init__(self, route: str) -> None:
        self.route = route

    def run(self, state: RequestState) -> RequestState:
        state.route = self.route
        return state


def test_a_routed_step_runs_only_on_its_route_and_the_trace_records_the_route(tiny_index: Any) -> None:
    index, _ = tiny_index
    for route, ran in (("small", "bm25"), ("default", "vector")):
        steps = [Route(route), Step(KeywordSearch(index), route="small"), Step(Broken("vector"), route="default",
                                                                               fallback=KeywordSearch(index, name="bm25-again"))]
        result = Pipeline(steps).run("ocean tides")
        assert result.trace.route == route and [s.name for s in result.trace.spans][1] == ran
        assert len(result.trace.spans) == (2 if route == "small" else 3)  # a step of the other route leaves no span
    assert Pipeline([KeywordSearch(index)]).run("tides").trace.route is None


def test_a_routed_step_needs_a_stage_before_it_that_writes_the_route(tiny_index: Any) -> None:
    index, _ = tiny_index
    with pytest.raises(WiringError, match="'bm25' runs on route 'small', but no stage before it writes 'route'"):
        Pipeline([Step(KeywordSearch(index), route="small"), Route("small")])
