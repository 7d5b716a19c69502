"""An index's vectors: the store its manifest names, and writing them (embedded through the cache): a qdrant-edge
shard as they are embedded, the other stores in bulk."""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, TypeVar

import numpy as np

from ragopt.backends.edge_store import ENGINE as EDGE_ENGINE
from ragopt.backends.edge_store import EdgeStore, chunk_keys
from ragopt.backends.embeddings import Embedder
from ragopt.backends.exact_store import ExactStore
from ragopt.backends.qdrant_store import ENGINE as QDRANT_ENGINE
from ragopt.backends.qdrant_store import QdrantStore
from ragopt.backends.vector_store import VectorStore
from ragopt.config import StoreConfig
from ragopt.index.manifest import Manifest
from ragopt.resources import Resources
from ragopt.types import Chunk

QUEUED_BLOCKS = 2  # blocks of vectors embedded ahead of the writer: a bound on the vectors the build holds
T = TypeVar("T")


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
    """Embed the chunks (cached) and store them in the manifest's store: a qdrant-edge shard (its graph built) in
    `folder/vectors`, written while the next vectors are embedded (`_write_edge`); the exact store there, or a
    server collection of its own published by pointing the manifest's collection alias at it, in bulk. Returns
    (dim, texts embedded, cache hits)."""
    if manifest.store == EDGE_ENGINE:
        return _write_edge(chunks, embedder, EdgeStore(folder / "vectors", store_config), progress)
    encoded = embedder.encode([c.indexed_text for c in chunks], [(c.tenant, c.scopes) for c in chunks], progress=progress)
    dim = int(encoded.vectors.shape[1])
    if manifest.store != QDRANT_ENGINE:
        store = ExactStore(folder / "vectors")
        store.create(dim)
        store.upsert(chunks, encoded.vectors)
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


def _write_edge(chunks: Sequence[Chunk], embedder: Embedder, store: EdgeStore, progress: bool) -> tuple[int, int, int]:
    """The chunks' points written into a new shard as their vectors come: the embedder streams them (the cached
    ones, then each block as it is embedded, in the order one `encode` call embeds them, so the vectors are the
    bulk path's) in a thread, at most QUEUED_BLOCKS blocks (of the embedder's `save_every` points, what it caches at
    once) ahead of this one, which upserts them; then every position's id and key, and the graph. The build holds
    a few blocks of vectors, not all of them."""
    texts, owners = [c.indexed_text for c in chunks], [(c.tenant, c.scopes) for c in chunks]
    hits, stream = embedder.encode_stream(texts, owners, progress=progress)
    dim = None
    try:
        for positions, vectors in prefetched(_blocks(stream, embedder.save_every), QUEUED_BLOCKS):
            if dim is None:
                dim = int(vectors.shape[1])
                store.create(dim)
            store.put_points(positions, [chunks[i] for i in positions], vectors)
        if dim is None:
            raise ValueError("no vectors to write")  # build_index refuses an empty corpus before this
        store.write_ids(np.arange(len(chunks), dtype=np.int64), chunk_keys(chunks))
        store.optimize()
    finally:
        store.close()
    return dim, len(chunks) - hits, hits


def _blocks(stream: Iterable[tuple[list[int], np.ndarray]], size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(positions, their vectors) of at least `size` points at a time (a vector shared by several texts is each's)."""
    positions: list[int] = []
    rows: list[np.ndarray] = []
    for indexes, vector in stream:
        positions += indexes
        rows += [vector] * len(indexes)
        if len(positions) >= size:
            yield np.asarray(positions, dtype=np.int64), np.stack(rows)
            positions, rows = [], []
    if positions:
        yield np.asarray(positions, dtype=np.int64), np.stack(rows)


def prefetched(items: Iterator[T], depth: int) -> Iterator[T]:
    """`items`, produced in a thread at most `depth` ahead of the caller, so producing the next overlaps using this
    one; the producer's exception is raised here, and a caller that stops early stops the producer at its next item."""
    handoff: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(message: tuple[str, Any]) -> bool:
        """Hand `message` over when there is room; False once the caller has stopped."""
        while not stop.is_set():
            try:
                handoff.put(message, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(("item", item)):
                    return
            put(("end", None))
        except BaseException as exc:  # handed to the caller, raised there
            put(("error", exc))
        finally:
            getattr(items, "close", lambda: None)()  # a generator stopped early: its `finally` blocks run now

    thread = threading.Thread(target=produce, name="ragopt-embed", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = handoff.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
