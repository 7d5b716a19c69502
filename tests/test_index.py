"""Indexes: a rebuild is a no-op, an interrupted build publishes nothing and its re-run reuses the cached
embeddings, point ids are deterministic, and each workspace holds its own index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragopt.config import ChunkerConfig
from ragopt.data.beir import load_beir
from ragopt.errors import InputError
from ragopt.index import build_index, make_embedder, open_index
from ragopt.stages.vector import QdrantStore
from ragopt.types import Document


def published(workspace: Path) -> list[Path]:
    root = workspace / "indexes"
    return sorted(p for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else []


def test_building_the_same_index_twice_is_a_no_op(tiny_beir: Path, workspace: Path) -> None:
    docs = load_beir(tiny_beir).documents
    cfg = ChunkerConfig(mode="tokens", size=16, overlap=4)
    cold = build_index(docs, cfg, make_embedder(workspace), workspace, progress=False)
    assert not cold.reused and cold.embedded == cold.index.manifest.n_chunks > len(docs)
    assert cold.index.store.count() == cold.index.manifest.n_chunks

    warm = build_index(docs, cfg, make_embedder(workspace), workspace, progress=False)
    assert warm.reused and warm.embedded == 0 and warm.index.path == cold.index.path
    assert published(workspace) == [cold.index.path]
    assert warm.seconds < 0.1 * cold.seconds + 0.05

    other = build_index(docs, ChunkerConfig(mode="whole"), make_embedder(workspace), workspace, progress=False)
    assert not other.reused and other.index.path != cold.index.path and len(published(workspace)) == 2
    changed = [Document(id=d.id, text=d.text + (" Edited." if d.id == "d1" else ""), title=d.title) for d in docs]
    rebuilt = build_index(changed, ChunkerConfig(mode="whole"), make_embedder(workspace), workspace, progress=False)
    assert not rebuilt.reused and rebuilt.embedded == 1 and rebuilt.cache_hits == len(docs) - 1  # one new text


def test_each_workspace_gets_its_own_index(tiny_beir: Path, tmp_path: Path) -> None:
    """The same corpus built in a second workspace must live there, not be served from the first one."""
    docs = load_beir(tiny_beir).documents
    ws1, ws2 = tmp_path / "ws1", tmp_path / "ws2"
    first = build_index(docs, ChunkerConfig(mode="whole"), make_embedder(ws1), ws1, progress=False)
    second = build_index(docs, ChunkerConfig(mode="whole"), make_embedder(ws2), ws2, progress=False)
    try:
        assert second.index.path == ws2 / "indexes" / first.index.manifest.id
        assert (ws2 / "indexes" / first.index.manifest.id / "manifest.json").exists()
        assert not second.reused and second.embedded == len(docs)  # ws2 has its own, empty cache
    finally:
        first.index.store.close()
        second.index.store.close()


def test_an_interrupted_build_publishes_nothing_and_the_rerun_reuses_embeddings(
    tiny_beir: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = load_beir(tiny_beir).documents
    cfg = ChunkerConfig(mode="tokens", size=12, overlap=0)
    real_upsert = QdrantStore.upsert

    def crash_after_five(self: QdrantStore, chunks: Any, vectors: Any, first_index: int = 0, batch: int = 512) -> None:
        real_upsert(self, chunks[:5], vectors[:5], first_index, batch)  # a fault on purpose: dies mid-upsert
        raise OSError("disk full")

    monkeypatch.setattr(QdrantStore, "upsert", crash_after_five)
    with pytest.raises(OSError, match="disk full"):
        build_index(docs, cfg, make_embedder(workspace), workspace, progress=False)
    assert published(workspace) == []  # no half index for a later run to pick up
    assert list((workspace / "indexes").iterdir()) == []  # and no temporary folder left behind

    monkeypatch.setattr(QdrantStore, "upsert", real_upsert)
    rerun = build_index(docs, cfg, make_embedder(workspace), workspace, progress=False)
    n = rerun.index.manifest.n_chunks
    assert not rerun.reused and rerun.embedded == 0 and rerun.cache_hits == n  # embeddings survived the crash
    assert rerun.index.store.count() == n and len(rerun.index.chunks) == n
    assert published(workspace) == [rerun.index.path]
    found = rerun.index.store.search(make_embedder(workspace).encode(["Who lays the eggs in a bee hive?"]).vectors[0], 1, None)
    assert rerun.index.chunks[found[0][0]].doc_id == "d3"


def test_reopening_a_published_index_and_deterministic_point_ids(tiny_beir: Path, workspace: Path) -> None:
    docs = load_beir(tiny_beir).documents
    report = build_index(docs, ChunkerConfig(mode="whole"), make_embedder(workspace), workspace, progress=False)
    index = report.index
    again = open_index(index.path)
    assert again.manifest == index.manifest and [c.id for c in again.chunks] == [c.id for c in index.chunks]
    n = index.store.count()
    vectors = make_embedder(workspace).encode([c.indexed_text for c in index.chunks[:3]]).vectors
    index.store.upsert(index.chunks[:3], vectors)  # the same chunks again: same point ids, nothing added
    assert index.store.count() == n == len(docs)
    m = index.manifest
    assert (m.n_documents, m.n_chunks, m.dim, m.has_tenants, m.has_scopes) == (len(docs), len(docs), 384, False, False)


def test_an_empty_corpus_is_an_input_error(workspace: Path) -> None:
    with pytest.raises(InputError, match="empty"):
        build_index([], ChunkerConfig(), make_embedder(workspace), workspace, progress=False)


def test_a_bm25_only_index_embeds_nothing_until_a_dense_search_needs_vectors(tiny_beir: Path, workspace: Path) -> None:
    from ragopt.config import RetrievalConfig
    from ragopt.pipeline import Pipeline
    from ragopt.retrieval import retrieval_stages

    docs = load_beir(tiny_beir).documents
    embedder = make_embedder(workspace)
    lexical = build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False, dense=False)
    index = lexical.index
    assert lexical.embedded == 0 and index.manifest.dim is None and not (index.path / "qdrant").exists()
    hits = Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever="bm25", top_k=3))).run("bee hive eggs").hits
    assert hits[0].chunk.doc_id == "d3"
    assert "model" not in embedder.__dict__  # the embedding model was never loaded

    dense = build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False, dense=True)
    assert dense.index is index and not dense.reused and dense.embedded == len(docs)
    assert open_index(index.path).manifest.dim == 384 and index.store.count() == len(docs)
    hits = Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever="dense", top_k=3))).run("bee hive eggs").hits
    assert hits[0].chunk.doc_id == "d3"
    again = build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False, dense=True)
    assert again.reused and again.embedded == 0
    assert published(workspace) == [index.path] and sorted(p.name for p in index.path.iterdir() if p.name.startswith(".")) == []
