"""Retrieval over duplicates: for every retriever, the top k is the head of the top 100, so that truncating one
deep ranking gives each top_k of a sweep. Real MiniLM embeddings, real Qdrant local mode, real BM25."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.config import ChunkerConfig, FusionConfig, RetrievalConfig
from ragopt.index import build_index, make_embedder
from ragopt.pipeline import Pipeline
from ragopt.plan import retrieval_stages
from ragopt.types import Document

TIE = "Magma rises under the volcano and the crust cracks."
CONFIGS = {
    "bm25": RetrievalConfig(retriever="bm25"),
    "dense": RetrievalConfig(retriever="dense"),
    "hybrid-rrf": RetrievalConfig(retriever="hybrid"),
    "hybrid-convex": RetrievalConfig(retriever="hybrid", fusion=FusionConfig(method="convex", alpha=0.4)),
}


@pytest.fixture(scope="module")
def duplicates_index(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """30 identical documents, 6 near-duplicates and 6 unrelated ones, indexed whole."""
    ws: Path = tmp_path_factory.mktemp("dupes") / "ws"
    docs = [Document(id=f"same{i:02d}", text=TIE) for i in range(30)]
    docs += [Document(id=f"near{i}", text=TIE + " Ash" + " ash" * i) for i in range(6)]
    docs += [Document(id=f"other{i}", text=t) for i, t in enumerate([
        "Bread rises in a warm oven.", "Tides follow the moon.", "Bees make honey.",
        "Chess openings are studied.", "Glaciers are compressed snow.", "Coffee contains caffeine.",
    ])]  # fmt: skip
    embedder = make_embedder(ws)
    report = build_index(docs, ChunkerConfig(mode="whole"), embedder, ws, progress=False)
    yield report.index, embedder
    report.index.store.close()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_top_k_is_the_head_of_the_top_100_on_duplicates(duplicates_index, name: str) -> None:  # type: ignore[no-untyped-def]
    index, embedder = duplicates_index
    config = CONFIGS[name]

    def ranking(k: int) -> list[str]:
        hits = Pipeline(retrieval_stages(index, embedder, config, k)).run("magma under a volcano").hits
        return [h.chunk.id for h in hits]

    deep = ranking(100)
    assert len(deep) >= 36  # every duplicate and near-duplicate was retrieved
    for k in (1, 2, 5, 10, 17, 29, 30, 31, 36):
        assert ranking(k) == deep[:k], (name, k)
