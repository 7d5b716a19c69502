"""Bounded cross-encoder rerank: depth 0 passes through; at most `depth` candidates are scored, in batches;
when the time budget runs out the unscored ones keep their fused order behind the scored ones; the trace
says how many were scored and the order before and after; a missing model path fails before any work."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ragopt.config import DEFAULT_EMBEDDER
from ragopt.errors import InputError
from ragopt.pipeline import Pipeline, RequestState
from ragopt.resources import Resources
from ragopt.stages.rerank import CrossEncoderRerank, RerankConfig, check_model_reference, reorder
from ragopt.types import Chunk, Hit, Query


def hits_of(texts: list[str]) -> list[Hit]:
    """A fused ranking whose scores fall with rank, one chunk per text."""
    return [
        Hit(chunk=Chunk(id=f"c{i}", doc_id=f"d{i}", start=0, end=len(t), text=t), score=1.0 / (i + 1), rank=i + 1, retriever="rrf")
        for i, t in enumerate(texts)
    ]


PASSAGES = [
    "Ocean tides are caused by the gravitational pull of the moon.",
    "Yeast ferments sugars in dough, making bread rise.",
    "Honey bees make honey in the hive; the queen lays eggs.",
    "A vaccine trains the immune system.",
    "Glaciers form where snow is compressed into ice.",
    "Chlorophyll absorbs light in plants.",
    "Earthquakes release energy as seismic waves.",
]


@pytest.fixture(scope="module")
def resources():  # type: ignore[no-untyped-def]
    with Resources() as r:
        yield r


def rerank(config: RerankConfig, resources: Resources, hits: list[Hit], query: str = "What causes tides?") -> RequestState:
    stage = CrossEncoderRerank(config, resources)
    pipeline = Pipeline([stage], inputs=("query", "hits"))
    return pipeline.run_state(RequestState(query=Query(text=query), hits=hits)).state


def test_depth_zero_passes_the_fused_order_through(resources: Resources) -> None:
    hits = hits_of(PASSAGES)
    state = rerank(RerankConfig(), resources, hits)
    assert state.hits == hits
    assert state.usage.attrs["scored"] == 0


def test_only_the_top_depth_are_reordered_and_the_trace_shows_both_orders(resources: Resources) -> None:
    hits = hits_of(PASSAGES)
    state = rerank(RerankConfig(model=DEFAULT_EMBEDDER, depth=4, batch_size=3), resources, hits)
    ids = [h.chunk.id for h in state.hits]
    assert sorted(ids[:4]) == ["c0", "c1", "c2", "c3"]
    assert ids[4:] == ["c4", "c5", "c6"]  # beyond depth: fused order, untouched
    attrs = state.usage.attrs
    assert attrs["scored"] == 4 and attrs["budget_exhausted"] is False
    assert attrs["order_before"] == ["c0", "c1", "c2", "c3"] and attrs["order_after"] == ids[:4]
    scores = [h.score for h in state.hits]
    assert scores == sorted(scores, reverse=True)  # a TREC run sorted by score keeps this order
    assert [h.rank for h in state.hits] == list(range(1, 8))


def test_reranked_scores_are_the_models_scores(resources: Resources) -> None:
    config = RerankConfig(model=DEFAULT_EMBEDDER, depth=5, batch_size=2)
    stage = CrossEncoderRerank(config, resources)
    hits = hits_of(PASSAGES)
    state = rerank(config, resources, hits, "Why does bread rise?")
    direct = stage.model.predict([("Why does bread rise?", h.chunk.indexed_text) for h in hits[:5]])
    expected = sorted(zip((h.chunk.id for h in hits[:5]), direct), key=lambda kv: -kv[1])
    assert [h.chunk.id for h in state.hits[:5]] == [cid for cid, _ in expected]
    assert [h.score for h in state.hits[:5]] == pytest.approx([float(s) for _, s in expected], rel=1e-5)


def test_an_exhausted_budget_keeps_the_fused_order_for_unscored_candidates(resources: Resources) -> None:
    hits = hits_of(PASSAGES)
    # One batch always runs; any real batch takes longer than a microsecond, so the budget stops the rest.
    state = rerank(RerankConfig(model=DEFAULT_EMBEDDER, depth=6, batch_size=2, budget_ms=0.001), resources, hits)
    attrs = state.usage.attrs
    assert attrs["scored"] == 2 and attrs["budget_exhausted"] is True
    ids = [h.chunk.id for h in state.hits]
    assert sorted(ids[:2]) == ["c0", "c1"]
    assert ids[2:] == ["c2", "c3", "c4", "c5", "c6"]
    assert [h.score for h in state.hits] == sorted((h.score for h in state.hits), reverse=True)


def test_a_passed_deadline_counts_as_an_exhausted_budget(resources: Resources) -> None:
    stage = CrossEncoderRerank(RerankConfig(model=DEFAULT_EMBEDDER, depth=6, batch_size=3), resources)
    state = RequestState(query=Query(text="tides"), hits=hits_of(PASSAGES), deadline=0.0)  # long past
    state = stage.run(state)
    assert state.usage.attrs["scored"] == 3 and state.usage.attrs["budget_exhausted"] is True


def test_reorder_fuses_rerank_scores_with_the_fused_order() -> None:
    hits = hits_of(["a", "b", "c", "d"])
    # The reranker puts c2 first, c0 last; the fused order is c0, c1, c2; c3 is unscored.
    scores = [0.1, 0.5, 0.9]
    alone = reorder(hits, scores, "none", 0.5, 60, "rerank")
    assert [h.chunk.id for h in alone] == ["c2", "c1", "c0", "c3"]
    # RRF, k=1: c0 1/4 + 1/2, c1 1/3 + 1/3, c2 1/2 + 1/4: c1 (0.667) falls below the tie c0 = c2 (0.75);
    # fusion's order is total, so the tie breaks by chunk id.
    fused = reorder(hits, scores, "rrf", 0.5, 1, "rerank")
    assert [h.chunk.id for h in fused] == ["c0", "c2", "c1", "c3"]
    # Convex with weight 1 is the reranker alone; weight 0 the fused order.
    assert [h.chunk.id for h in reorder(hits, scores, "convex", 1.0, 60, "r")][:3] == ["c2", "c1", "c0"]
    assert [h.chunk.id for h in reorder(hits, scores, "convex", 0.0, 60, "r")][:3] == ["c0", "c1", "c2"]
    assert [h.retriever for h in fused] == ["rerank", "rerank", "rerank", "rrf"]


def test_a_missing_model_path_is_an_input_error_naming_the_key(tmp_path: Path) -> None:
    for missing in (str(tmp_path / "no-such-model"), "./models/ce", "~/nowhere/ce"):
        with pytest.raises(InputError) as err:
            CrossEncoderRerank(RerankConfig(model=missing, depth=20))
        assert err.value.field == "rerank.model" and missing in str(err.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not a model folder"):
        check_model_reference(str(tmp_path / "empty"), "--reranker")
    check_model_reference("cross-encoder/ms-marco-MiniLM-L-6-v2", "--reranker")  # a hub name: the loader's job


def test_a_depth_without_a_model_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match="model is required"):
        RerankConfig(depth=20)
    with pytest.raises(ValidationError):
        RerankConfig(model=DEFAULT_EMBEDDER, depth=1000)  # over the hard cap
