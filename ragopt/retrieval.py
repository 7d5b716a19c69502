"""Assembles the retrieval stages for a configuration: dense, bm25, or hybrid (both, then fusion)."""

from __future__ import annotations

from pathlib import Path

from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig, StoreConfig
from ragopt.index import Index, build_index, make_embedder
from ragopt.pipeline import Stage
from ragopt.resources import Resources
from ragopt.stages.embedding import Embedder, EmbedQuery
from ragopt.stages.fusion import Fuse
from ragopt.stages.keyword import KeywordSearch
from ragopt.stages.vector import VectorSearch


def retrieval_stages(
    index: Index, embedder: Embedder, config: RetrievalConfig, k: int | None = None, *, cache_queries: bool = True
) -> list[Stage]:
    """Stages that leave the best `k` (default `config.top_k`) hits in `state.hits`; `cache_queries=False`
    encodes every query afresh, for latency measurements that must not depend on earlier runs."""
    k = k or config.top_k
    if config.retriever != "bm25":
        index.ensure_vectors(embedder)
    if config.retriever == "dense":
        return [EmbedQuery(embedder, cache_queries), VectorSearch(index, k)]
    if config.retriever == "bm25":
        return [KeywordSearch(index, config.bm25, k)]
    depth = max(k, config.fusion.depth)
    return [
        EmbedQuery(embedder, cache_queries),
        VectorSearch(index, depth),
        KeywordSearch(index, config.bm25, depth),
        Fuse(config.fusion, k),
    ]


def build_retrieval_stages(
    dataset: str | Path,
    workspace: Path,
    config: RetrievalConfig | None = None,
    chunker: ChunkerConfig | None = None,
    embedder_config: EmbedderConfig | None = None,
    store: StoreConfig | None = None,
    split: str = "test",
    resources: Resources | None = None,
) -> list[Stage]:
    """Load an evaluation set's corpus, build (or reuse) its index, and return its retrieval stages; the
    model and index are held by `resources` (a private one when None)."""
    from ragopt.data import load_evalset

    evalset = load_evalset(dataset, split=split)
    embedder = make_embedder(workspace, embedder_config, resources)
    config = config or RetrievalConfig()
    report = build_index(
        evalset.documents, chunker or ChunkerConfig(), embedder, workspace, store_config=store, dense=config.retriever != "bm25"
    )
    return retrieval_stages(report.index, embedder, config)
