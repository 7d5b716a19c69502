"""Qdrant local mode: deterministic point ids (re-upserting changes nothing), exact cosine scores, payload
permission filters, and the VectorSearch stage over the MiniLM index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragopt.stages.vector import QdrantStore, point_id
from ragopt.types import Chunk, Query


def chunks(n: int, tenant: str | None = None, scopes: tuple[str, ...] = (), prefix: str = "c") -> list[Chunk]:
    return [Chunk(id=f"{prefix}{i}", doc_id=f"{prefix}-doc{i}", start=0, end=1, text="x", tenant=tenant, scopes=scopes) for i in range(n)]


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = QdrantStore("chunks", str(tmp_path / "qdrant"))
    yield s
    s.close()


def test_point_ids_are_deterministic_uuids() -> None:
    assert point_id("abc") == point_id("abc") != point_id("abd")
    assert len(point_id("abc")) == 36


def test_upserting_the_same_chunks_twice_keeps_the_count(store: QdrantStore) -> None:
    rng = np.random.default_rng(0)
    cs = chunks(30)
    vectors = rng.normal(size=(30, 8)).astype(np.float32)
    store.create(8)
    store.create(8)  # creating an existing collection is a no-op
    store.upsert(cs, vectors, batch=7)
    assert store.count() == 30
    store.upsert(cs, vectors, batch=11)
    store.upsert(cs[:10], vectors[:10])
    assert store.count() == 30


def test_search_returns_positions_with_exact_cosine_scores(store: QdrantStore) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(50, 16)).astype(np.float32)
    store.create(16)
    store.upsert(chunks(50), vectors, batch=13)
    q = rng.normal(size=16).astype(np.float32)
    found = store.search(q, 5, None)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cos = unit @ (q / np.linalg.norm(q))
    expected = np.argsort(-cos)[:5]
    assert [i for i, _ in found] == expected.tolist()
    assert np.allclose([s for _, s in found], cos[expected], atol=1e-5)
    assert len(store.search(q, 500, None)) == 50


def test_payload_filter_keeps_tenants_and_scopes_apart(store: QdrantStore) -> None:
    groups = [chunks(5, "a", prefix="a"), chunks(5, "b", prefix="b"), chunks(5, None, prefix="s"),
              chunks(5, "a", ("hr",), prefix="ahr"), chunks(5, None, ("ops",), prefix="sops")]  # fmt: skip
    all_chunks = [c for g in groups for c in g]
    vectors = np.random.default_rng(2).normal(size=(len(all_chunks), 8)).astype(np.float32)
    store.create(8)
    store.upsert(all_chunks, vectors)
    q = vectors[5]  # exactly tenant b's first chunk

    def seen(query: Query) -> set[str]:
        return {all_chunks[i].id.rstrip("0123456789") for i, _ in store.search(q, 100, query)}

    assert seen(Query(text="", tenant="a")) == {"a", "s"}
    assert seen(Query(text="", tenant="a", scopes=["hr"])) == {"a", "s", "ahr"}
    assert seen(Query(text="", tenant="b", scopes=["hr", "ops"])) == {"b", "s", "sops"}
    assert seen(Query(text="", tenant="c")) == {"s"}
    assert seen(Query(text="")) == {"s"}  # no tenant: shared data only, at this level


def test_vector_stage_over_minilm(tiny_index: Any) -> None:
    from ragopt.pipeline import Pipeline
    from ragopt.stages.embedding import EmbedQuery
    from ragopt.stages.vector import VectorSearch

    index, embedder = tiny_index
    result = Pipeline([EmbedQuery(embedder), VectorSearch(index, 3)]).run("Why can light not escape a black hole?")
    assert [h.rank for h in result.hits] == [1, 2, 3] and result.hits[0].chunk.doc_id == "d4"
    assert all(h.retriever == "vector" for h in result.hits)
    scores = [h.score for h in result.hits]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1
    q = embedder.encode(["Why can light not escape a black hole?"]).vectors[0]
    doc = embedder.encode([result.hits[0].chunk.indexed_text]).vectors[0]
    assert scores[0] == pytest.approx(float(q @ doc), abs=1e-4)  # cosine of the normalized MiniLM vectors
