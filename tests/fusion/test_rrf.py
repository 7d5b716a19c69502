"""Reciprocal rank fusion: hand-computed scores, k, ties, and the Fuse stage over real retrievers."""

from __future__ import annotations

from typing import Any

import pytest

from ragopt.config import FusionConfig
from ragopt.fusion import rrf
from ragopt.errors import WiringError
from ragopt.pipeline import Pipeline
from ragopt.stages.embedding import EmbedQuery
from ragopt.stages.fusion import Fuse
from ragopt.stages.keyword import KeywordSearch
from ragopt.stages.vector import VectorSearch


def test_hand_computed_k60() -> None:
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.1)]
    sparse = [("b", 12.0), ("d", 7.0)]
    fused = rrf([dense, sparse])
    assert [k for k, _ in fused] == ["b", "a", "d", "c"]
    scores = dict(fused)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["a"] == pytest.approx(1 / 61)
    assert scores["d"] == pytest.approx(1 / 62)
    assert scores["c"] == pytest.approx(1 / 63)


def test_k_changes_the_weight_of_the_top() -> None:
    # a: rank 1 in one list only; b: rank 3 in both lists
    one, two = [("a", 1.0), ("x", 0.9), ("b", 0.8)], [("y", 1.0), ("z", 0.9), ("b", 0.8)]
    assert [k for k, _ in rrf([one, two], rrf_k=60)][0] == "b"  # 2/63 = 0.0317 > 1/61 = 0.0164
    small = dict(rrf([one, two], rrf_k=1))
    assert small["a"] == pytest.approx(1 / 2) and small["b"] == pytest.approx(2 / 4)
    assert dict(rrf([one, two], rrf_k=0.5))["a"] > dict(rrf([one, two], rrf_k=0.5))["b"]  # 1/1.5 > 2/3.5


def test_scores_are_ignored_and_ties_are_ordered_by_key() -> None:
    assert rrf([[("a", 100.0), ("b", -5.0)]]) == rrf([[("a", 0.0), ("b", 0.0)]])
    fused = rrf([[("b", 1), ("a", 1)], [("a", 1), ("b", 1)]])
    assert [k for k, _ in fused] == ["a", "b"] and fused[0][1] == fused[1][1]
    assert rrf([]) == [] and rrf([[], []]) == []


def test_fuse_stage_over_real_dense_and_bm25_candidates(tiny_index: Any) -> None:
    index, embedder = tiny_index
    pipeline = Pipeline([EmbedQuery(embedder), VectorSearch(index, 6), KeywordSearch(index, k=6), Fuse(FusionConfig(rrf_k=60), k=4)])
    result = pipeline.run("What causes ocean tides?")
    dense, sparse = result.state.candidates["vector"], result.state.candidates["bm25"]
    expected: dict[str, float] = {}
    for hits in (dense, sparse):
        for h in hits:
            expected[h.chunk.id] = expected.get(h.chunk.id, 0.0) + 1 / (60 + h.rank)
    best = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))[:4]  # ties by chunk id
    assert [(h.chunk.id, pytest.approx(h.score)) for h in result.hits] == [(cid, s) for cid, s in best]
    assert [h.rank for h in result.hits] == [1, 2, 3, 4] and {h.retriever for h in result.hits} == {"rrf"}
    assert result.hits[0].chunk.doc_id == "d6"


def test_fuse_without_candidates_is_a_wiring_error_when_the_pipeline_is_built() -> None:
    with pytest.raises(WiringError, match="'fuse' reads 'candidates.vector'"):
        Pipeline([Fuse()])
