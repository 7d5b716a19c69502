"""Writing an index's vectors (ragopt/index/vectors.py): a qdrant-edge build writes its points while the next
are embedded, a few blocks behind the embedder, and gives the index the bulk path gives (same ids, keys and
search results as the exact store's bulk build of the same chunks, every vector cached for a re-run); the
bounded hand-off between the two threads passes a producer's error on and stops the producer when its caller
stops."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from ragopt.backends.edge_store import EdgeStore, chunk_keys
from ragopt.backends.embeddings import Embedder
from ragopt.config import ChunkerConfig, EmbedderConfig, StoreConfig
from ragopt.data.beir import load_beir
from ragopt.index import build_index, make_embedder
from ragopt.index.vectors import QUEUED_BLOCKS, prefetched

CHUNKING = ChunkerConfig(chunker="tokens", size=8, overlap=0)
SAVE_EVERY = 4  # blocks of 4 vectors (batches of 2): the tiny corpus's 36 chunks come in 9


def _embedder(ws: Path):  # type: ignore[no-untyped-def]
    embedder = make_embedder(ws, EmbedderConfig(batch_size=2))
    embedder.save_every = SAVE_EVERY
    return embedder


def test_an_edge_build_writes_while_embedding_and_gives_the_bulk_builds_index(
    tiny_beir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = load_beir(tiny_beir).documents
    embedder = _embedder(tmp_path / "ws-edge")
    embedded, embedded_at_writes = [0], []  # texts the encoder has embedded so far; that count at each write of points
    embed_block, put_points = Embedder.embed_block, EdgeStore.put_points

    def counting(self: Embedder, texts: list[str], role: str = "passage") -> np.ndarray:
        vectors = embed_block(self, texts, role)  # type: ignore[arg-type]
        embedded[0] += len(texts)
        return vectors

    def recording(self: EdgeStore, ids: np.ndarray, chunks: list, vectors: np.ndarray) -> None:
        embedded_at_writes.append(embedded[0])
        put_points(self, ids, chunks, vectors)

    monkeypatch.setattr(Embedder, "embed_block", counting)
    monkeypatch.setattr(EdgeStore, "put_points", recording)
    edge = build_index(docs, CHUNKING, embedder, tmp_path / "ws-edge", store_config=StoreConfig(engine="qdrant-edge"),
                       progress=False)
    monkeypatch.undo()
    n = edge.index.manifest.n_chunks
    assert edge.embedded == embedded[0] == n and edge.index.manifest.store == "qdrant-edge"
    assert len(embedded_at_writes) >= n // SAVE_EVERY
    # the first points are written while the encoder is at most the queue's blocks (and one in each hand) ahead
    assert embedded_at_writes[0] <= (QUEUED_BLOCKS + 2) * SAVE_EVERY < n
    store = edge.index.store
    assert store.ids.tolist() == list(range(n)) and store.keys.tolist() == chunk_keys(edge.index.chunks).tolist()

    exact = build_index(docs, CHUNKING, _embedder(tmp_path / "ws-exact"), tmp_path / "ws-exact", progress=False)
    assert [c.id for c in exact.index.chunks] == [c.id for c in edge.index.chunks]
    queries = embedder.encode(["Which bees mate with the queen?", "volcano ash", "rain in a desert"]).vectors
    for q in queries:
        got, want = store.search(q, 5, None), exact.index.store.search(q, 5, None)
        assert [p for p, _ in got] == [p for p, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-5)
    again = build_index(docs, CHUNKING, _embedder(tmp_path / "ws-edge"), tmp_path / "ws-edge",
                        store_config=StoreConfig(engine="qdrant-edge"), progress=False)
    assert again.reused and again.embedded == 0


def test_the_handoff_raises_the_producers_error_after_what_it_produced() -> None:
    def items() -> Iterator[int]:
        yield from range(5)
        raise RuntimeError("the encoder failed")

    got = []
    with pytest.raises(RuntimeError, match="the encoder failed"):
        for item in prefetched(items(), 2):
            got.append(item)
    assert got == [0, 1, 2, 3, 4]


def test_a_caller_that_stops_stops_the_producer_a_few_items_ahead() -> None:
    produced, finished = [], threading.Event()

    def items() -> Iterator[int]:
        try:
            for i in range(1000):
                produced.append(i)
                yield i
        finally:
            finished.set()

    for item in prefetched(items(), 2):
        if item == 3:
            break
    assert finished.wait(5)  # the producer let its generator go: its `finally` ran
    assert len(produced) <= 3 + 1 + 2 + 1  # what was taken, the item in hand, the queue, the one waiting to be put
