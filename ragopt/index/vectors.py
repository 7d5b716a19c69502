"""An index's vectors: the store its manifest names, and writing them in bulk (embedded through the cache)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ragopt.backends.edge_store import ENGINE as EDGE_ENGINE
from ragopt.backends.edge_store import EdgeStore
from ragopt.backends.embeddings import Embedder
from ragopt.backends.exact_store import ExactStore
from ragopt.backends.qdrant_store import ENGINE as QDRANT_ENGINE
from ragopt.backends.qdrant_store import QdrantStore
from ragopt.backends.vector_store import VectorStore
from ragopt.config import StoreConfig
from ragopt.index.manifest import Manifest
from ragopt.resources import Resources
from ragopt.types import Chunk


def make_store(folder: Path, manifest: Manifest, store_config: StoreConfig, resources: Resources) -> VectorStore:
    if manifest.store == QDRANT_ENGINE:
        return QdrantStore(manifest.collection, store_config, resources)
    if manifest.store == EDGE_ENGINE:
        return EdgeStore(folder / "vectors", store_config)
    return ExactStore(folder / "vectors")


def write_vectors(
    chunks: Sequence[Chunk],
    embedder: Embedder,
    folder: Path,
    manifest: Manifest,
    store_config: StoreConfig,
    resources: Resources,
    progress: bool,
) -> tuple[int, int, int]:
    """Embed the chunks (cached) and store them in bulk in the manifest's store: the exact store or a qdrant-edge
    shard (its graph built) in `folder/vectors`, or a server collection of its own published by pointing the
    manifest's collection alias at it. Returns (dim, texts embedded, cache hits)."""
    encoded = embedder.encode([c.indexed_text for c in chunks], [(c.tenant, c.scopes) for c in chunks], progress=progress)
    dim = int(encoded.vectors.shape[1])
    if manifest.store != QDRANT_ENGINE:
        store = EdgeStore(folder / "vectors", store_config) if manifest.store == EDGE_ENGINE else ExactStore(folder / "vectors")
        store.create(dim)
        store.upsert(chunks, encoded.vectors)
        if isinstance(store, EdgeStore):
            store.optimize()
        store.close()
        return dim, encoded.cache_misses, encoded.cache_hits
    server = QdrantStore(f"{manifest.collection}_build{os.getpid()}", store_config, resources)
    try:
        server.create(dim)
        server.upsert(chunks, encoded.vectors)
        server.publish(manifest.collection)
    except BaseException:
        server.drop()
        raise
    return dim, encoded.cache_misses, encoded.cache_hits
