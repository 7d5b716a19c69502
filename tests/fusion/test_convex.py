"""Convex fusion: min-max and z-score normalization computed by hand, alpha, missing keys, degenerate input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragopt.config import FusionConfig
from ragopt.fusion.convex import convex, normalize
from ragopt.pipeline import RequestState
from ragopt.stages.fusion import Fuse
from ragopt.types import Chunk, Hit, Query

DENSE = [("a", 0.9), ("b", 0.5), ("c", 0.1)]
SPARSE = [("b", 10.0), ("d", 4.0), ("a", 2.0)]


def test_minmax_by_hand() -> None:
    # dense -> a 1, b 0.5, c 0; sparse -> b 1, d (4-2)/8 = 0.25, a 0; a missing key takes the list's floor (0)
    fused = dict(convex(DENSE, SPARSE, alpha=0.5, norm="minmax"))
    assert fused == pytest.approx({"a": 0.5, "b": 0.75, "c": 0.0, "d": 0.125})
    assert [k for k, _ in convex(DENSE, SPARSE, alpha=0.5)] == ["b", "a", "d", "c"]
    heavy = dict(convex(DENSE, SPARSE, alpha=0.8))
    assert heavy == pytest.approx({"a": 0.8, "b": 0.4 + 0.2, "c": 0.0, "d": 0.2 * 0.25})
    assert [k for k, _ in convex(DENSE, SPARSE, alpha=0.8)] == ["a", "b", "d", "c"]


def test_zscore_by_hand() -> None:
    sd1 = math.sqrt((0.4**2 + 0 + 0.4**2) / 3)  # population std of 0.9, 0.5, 0.1
    z1 = {"a": 0.4 / sd1, "b": 0.0, "c": -0.4 / sd1}
    mean2 = 16 / 3
    sd2 = math.sqrt(((10 - mean2) ** 2 + (4 - mean2) ** 2 + (2 - mean2) ** 2) / 3)
    z2 = {"b": (10 - mean2) / sd2, "d": (4 - mean2) / sd2, "a": (2 - mean2) / sd2}
    floor1, floor2 = z1["c"], z2["a"]
    expected = {
        "a": 0.5 * z1["a"] + 0.5 * z2["a"],
        "b": 0.5 * z1["b"] + 0.5 * z2["b"],
        "c": 0.5 * z1["c"] + 0.5 * floor2,
        "d": 0.5 * floor1 + 0.5 * z2["d"],
    }
    fused = convex(DENSE, SPARSE, alpha=0.5, norm="zscore")
    assert dict(fused) == pytest.approx(expected)
    assert [k for k, _ in fused] == ["b", "a", "d", "c"]
    assert expected["b"] == pytest.approx(0.686406, abs=1e-6) and expected["c"] == pytest.approx(-1.102663, abs=1e-6)


def test_alpha_extremes_reproduce_one_ranking() -> None:
    assert [k for k, _ in convex(DENSE, SPARSE, alpha=1.0)][:3] == ["a", "b", "c"]
    assert [k for k, _ in convex(DENSE, SPARSE, alpha=0.0)][:3] == ["b", "d", "a"]


def test_normalize_degenerate_inputs() -> None:
    assert normalize(np.array([3.0, 3.0]), "minmax").tolist() == [1.0, 1.0]
    assert normalize(np.array([3.0, 3.0]), "zscore").tolist() == [0.0, 0.0]
    assert normalize(np.array([]), "minmax").size == 0
    assert normalize(np.array([2.0, 4.0, 6.0]), "minmax").tolist() == [0.0, 0.5, 1.0]
    z = normalize(np.array([2.0, 4.0, 6.0]), "zscore")
    assert z.mean() == pytest.approx(0.0) and z.std() == pytest.approx(1.0)
    # one list empty: the other decides alone, scaled by its weight
    assert dict(convex(DENSE, [], alpha=0.5)) == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.0})


def _hits(pairs: list[tuple[str, float]], retriever: str) -> list[Hit]:
    return [
        Hit(chunk=Chunk(id=k, doc_id=k, start=0, end=1, text=k), score=s, rank=r, retriever=retriever)
        for r, (k, s) in enumerate(pairs, start=1)
    ]


def test_fuse_stage_convex_weights_the_dense_retriever_by_alpha_whatever_the_stage_order() -> None:
    expected = [("a", 1, "convex"), ("b", 2, "convex"), ("d", 3, "convex")]
    for order in (("vector", "bm25"), ("bm25", "vector")):
        state = RequestState(query=Query(text="q"))
        lists = {"vector": _hits(DENSE, "vector"), "bm25": _hits(SPARSE, "bm25")}
        state.candidates = {name: lists[name] for name in order}
        out = Fuse(FusionConfig(method="convex", alpha=0.8), k=3).run(state)
        assert [(h.chunk.id, h.rank, h.retriever) for h in out.hits] == expected
        assert out.hits[0].score == pytest.approx(0.8)
    state.candidates["third"] = _hits(DENSE, "x")  # a list the stage was not told to read is left alone
    assert [h.chunk.id for h in Fuse(FusionConfig(method="convex", alpha=0.8), k=3).run(state).hits] == ["a", "b", "d"]
    with pytest.raises(ValueError, match="exactly two retrievers"):
        Fuse(FusionConfig(method="convex"), inputs=("vector", "bm25", "third"))
