"""Vector stores behind one interface: the numpy exact store (the embedded default) and qdrant-client against
a server API (its in-process ":memory:" stand-in). Both: re-upserting changes nothing, exact cosine scores,
permission filters; the exact store also gives a total order (ties by position). Then the VectorSearch
stage over the MiniLM index."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from ragopt.backends.exact_store import ExactStore
from ragopt.backends.qdrant_store import QdrantStore, point_id
from ragopt.config import StoreConfig
from ragopt.resources import Resources
from ragopt.types import Chunk, Query


def chunks(n: int, tenant: str | None = None, scopes: tuple[str, ...] = (), prefix: str = "c") -> list[Chunk]:
    return [Chunk(id=f"{prefix}{i}", doc_id=f"{prefix}-doc{i}", start=0, end=1, text="x", tenant=tenant, scopes=scopes) for i in range(n)]


@pytest.fixture(params=["numpy-exact", "qdrant"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "numpy-exact":
        s: Any = ExactStore(tmp_path / "vectors")
        yield s
        s.close()
    else:
        with Resources() as resources:
            yield QdrantStore("chunks", StoreConfig(url=":memory:"), resources)


def test_point_ids_are_deterministic_uuids() -> None:
    assert point_id("abc") == point_id("abc") != point_id("abd")
    assert len(point_id("abc")) == 36


def test_upserting_the_same_chunks_twice_keeps_the_count(store: Any) -> None:
    rng = np.random.default_rng(0)
    cs = chunks(30)
    vectors = rng.normal(size=(30, 8)).astype(np.float32)
    store.create(8)
    store.create(8)  # creating an existing store is a no-op
    store.upsert(cs, vectors)
    assert store.count() == 30
    store.upsert(cs, vectors)
    store.upsert(cs[:10], vectors[:10])
    assert store.count() == 30


def test_search_returns_positions_with_exact_cosine_scores(store: Any) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(50, 16)).astype(np.float32)
    store.create(16)
    store.upsert(chunks(50), vectors)
    q = rng.normal(size=16).astype(np.float32)
    found = store.search(q, 5, None)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cos = unit @ (q / np.linalg.norm(q))
    expected = np.argsort(-cos)[:5]
    assert [i for i, _ in found] == expected.tolist()
    assert np.allclose([s for _, s in found], cos[expected], atol=1e-5)
    assert len(store.search(q, 500, None)) == 50


def test_payload_filter_keeps_tenants_and_scopes_apart(store: Any) -> None:
    groups = [chunks(5, "a", prefix="a"), chunks(5, "b", prefix="b"), chunks(5, None, prefix="s"),
              chunks(5, "a", ("hr",), prefix="ahr"), chunks(5, None, ("ops",), prefix="sops")]  # fmt: skip
    all_chunks = [c for g in groups for c in g]
    all_chunks = all_chunks[1::2] + all_chunks[::2]  # owners interleaved in chunk order
    vectors = np.random.default_rng(2).normal(size=(len(all_chunks), 8)).astype(np.float32)
    store.create(8)
    store.upsert(all_chunks, vectors)
    qi = next(i for i, c in enumerate(all_chunks) if c.id == "b0")
    q = vectors[qi]  # exactly tenant b's first chunk

    def seen(query: Query) -> set[str]:
        return {all_chunks[i].id.rstrip("0123456789") for i, _ in store.search(q, 100, query)}

    assert seen(Query(text="", tenant="a")) == {"a", "s"}
    assert seen(Query(text="", tenant="a", scopes=["hr"])) == {"a", "s", "ahr"}
    assert seen(Query(text="", tenant="b", scopes=["hr", "ops"])) == {"b", "s", "sops"}
    assert seen(Query(text="", tenant="c")) == {"s"}
    assert seen(Query(text="")) == {"s"}  # no tenant: shared data only, at this level
    top = store.search(q, 1, Query(text="", tenant="b"))
    assert top[0][0] == qi and top[0][1] == pytest.approx(1.0, abs=1e-5)
    # what tenant b gets is the cosine of exactly its own and the shared unscoped rows, nothing else
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    expected = {i: float(unit[i] @ unit[qi]) for i, c in enumerate(all_chunks) if c.tenant in ("b", None) and not c.scopes}
    got = dict(store.search(q, 100, Query(text="", tenant="b")))
    assert got.keys() == expected.keys() and all(got[i] == pytest.approx(expected[i], abs=1e-5) for i in got)


def test_exact_store_ties_are_ordered_by_position_so_a_shorter_list_is_a_head(tmp_path: Path) -> None:
    """Near-duplicate passages score alike: the cut-off must not pick arbitrary members of a tie."""
    rng = np.random.default_rng(3)
    distinct = rng.normal(size=(6, 8)).astype(np.float32)
    q = distinct[0]
    vectors = np.vstack([distinct[1:], np.repeat(q[None, :], 7, axis=0) * 2.0])  # 7 exact copies of q, tied at 1.0
    order = rng.permutation(len(vectors))
    store = ExactStore(tmp_path / "vectors")
    store.create(8)
    store.upsert(chunks(len(vectors)), vectors[order])
    tied = sorted(int(p) for p in np.flatnonzero(order >= 5))  # positions holding a copy of q
    full = store.search(q, 100, None)
    assert [p for p, _ in full[:7]] == tied
    for k in range(1, len(vectors) + 1):
        assert store.search(q, k, None) == full[:k]


def test_exact_store_reopens_from_its_files(tmp_path: Path) -> None:
    vectors = np.random.default_rng(4).normal(size=(12, 4)).astype(np.float32)
    cs = chunks(6, "a", prefix="a") + chunks(6, "b", prefix="b")
    writer = ExactStore(tmp_path / "vectors")
    writer.create(4)
    writer.upsert(cs, vectors)
    reader = ExactStore(tmp_path / "vectors")
    assert reader.count() == 12
    asked = Query(text="", tenant="b")
    assert reader.search(vectors[7], 3, asked) == writer.search(vectors[7], 3, asked)
    assert reader.search(vectors[7], 1, asked)[0][0] == 7
    assert sorted(p.name for p in (tmp_path / "vectors").iterdir()) == ["owners.json", "positions.npy", "vectors.npy"]


def test_vector_stage_over_minilm(tiny_index: Any) -> None:
    from ragopt.pipeline import Pipeline
    from ragopt.stages.embedding import EmbedQuery
    from ragopt.stages.vector import VectorSearch

    index, embedder = tiny_index
    assert index.manifest.store == "numpy-exact"
    result = Pipeline([EmbedQuery(embedder), VectorSearch(index, 3)]).run("Why can light not escape a black hole?")
    assert [h.rank for h in result.hits] == [1, 2, 3] and result.hits[0].chunk.doc_id == "d4"
    assert all(h.retriever == "vector" for h in result.hits)
    scores = [h.score for h in result.hits]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1
    q = embedder.encode(["Why can light not escape a black hole?"]).vectors[0]
    doc = embedder.encode([result.hits[0].chunk.indexed_text]).vectors[0]
    assert scores[0] == pytest.approx(float(q @ doc), abs=1e-4)  # cosine of the normalized MiniLM vectors
