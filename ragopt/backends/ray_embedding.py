"""An index's texts embedded as Ray tasks on every node of a cluster (`ragopt index --executor ray`, and the
index builds of `ragopt sweep --executor ray`), the index written by the driver.

The driver's Embedder keeps its own work: which texts the cache lacks, their order (longest first), the blocks
the cache stores one at a time. Only the model's part moves: each block is cut into pieces of PIECE_BATCHES
batches (fewer for a small block, so every CPU gets one), and each piece is a Ray task (one CPU, spread over
the nodes) whose worker process loads the embedder once, under its fingerprint, and keeps it for every later
piece. The driver keeps at most IN_FLIGHT_PER_CPU pieces per CPU of the cluster in flight, takes the vectors
back in order and stores them in its cache (so a re-run, on Ray or not, reuses them) before handing them to
the index build, the one writer of the store.

A worker whose model files differ from the driver's (another fingerprint) stops the build with one line:
its vectors would not be the ones the index id promises. Vectors equal the local build's within float
rounding (a piece pads its batches as the local block does, on one thread instead of the process's)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import Any

import numpy as np

from ragopt.backends.embeddings import Embedder, Role
from ragopt.config import EmbedderConfig
from ragopt.errors import InputError

PIECE_BATCHES = 4  # batches per task at most: 256 chunks, a few seconds of MiniLM on one core
IN_FLIGHT_PER_CPU = 2  # pieces queued per CPU: a worker never waits for the driver, the driver holds few vectors

_LOADED: dict[str, Embedder] = {}  # in a worker process: the embedder of each fingerprint, loaded once


def embed_piece(config: EmbedderConfig, fingerprint: str, texts: list[str], role: Role) -> tuple[np.ndarray, str]:
    """A Ray task's body: the vectors of `texts` by the embedder `config` names, and the node that made them."""
    import ray

    embedder = _LOADED.get(fingerprint)
    if embedder is None:
        embedder = Embedder(config)  # no cache here: the driver stores what it gets back
        if embedder.fingerprint != fingerprint:
            raise InputError(f"a Ray worker's embedder {config.model} has the fingerprint {embedder.fingerprint}, the "
                             f"driver's {fingerprint}: install the same model on every node", field="executor")
        _LOADED[fingerprint] = embedder
    return embedder.embed_block(texts, role), ray.get_runtime_context().get_node_id()


class RayBlocks:
    """`Embedder.remote` on Ray: the vectors of each block of texts, in order, embedded by tasks."""

    def __init__(self, ray: Any, embedder: Embedder):
        self.ray = ray
        self.batch = embedder.config.batch_size
        self.cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.task = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(embed_piece)
        self.args = (ray.put(embedder.config), embedder.fingerprint)
        self.tasks = 0
        self.nodes: set[str] = set()  # the nodes whose workers embedded a piece

    def __call__(self, blocks: Iterable[list[str]], role: Role) -> Iterator[np.ndarray]:
        from ray.exceptions import RayTaskError

        pieces = ((b, piece) for b, texts in enumerate(blocks) for piece in self._cut(texts))
        flying: deque[tuple[int, Any]] = deque()
        done: list[np.ndarray] = []  # the pieces of the block being collected
        block = 0
        for b, texts in chain(pieces, [(-1, [])]):  # a last empty piece flushes the queue
            if texts:
                flying.append((b, self.task.remote(*self.args, texts, role)))
                self.tasks += 1
            while flying and (len(flying) >= self.cpus * IN_FLIGHT_PER_CPU or not texts):
                first, ref = flying.popleft()
                if first != block:  # the previous block is whole
                    yield np.concatenate(done)
                    done, block = [], first
                try:
                    vectors, node = self.ray.get(ref)
                except RayTaskError as exc:
                    if isinstance(exc.cause, InputError):
                        raise exc.cause from None
                    raise
                done.append(vectors)
                self.nodes.add(node)
        if done:
            yield np.concatenate(done)

    def _cut(self, texts: list[str]) -> Iterator[list[str]]:
        """A block in pieces of whole batches, PIECE_BATCHES at most, fewer when that leaves a CPU idle."""
        batch = self.batch
        size = batch * max(1, min(PIECE_BATCHES, math.ceil(len(texts) / batch / self.cpus)))
        return (texts[p : p + size] for p in range(0, len(texts), size))

    def summary(self) -> str:
        return f"embedded by {self.tasks} Ray tasks on {len(self.nodes)} node{'s' * (len(self.nodes) != 1)}"


@contextmanager
def embedding_on_ray(ray: Any, embedder: Embedder) -> Iterator[RayBlocks]:
    """`embedder`'s texts embedded as Ray tasks of the connected `ray` (ragopt/backends/ray_cluster.py) while
    the context lasts; in this process again after."""
    blocks = RayBlocks(ray, embedder)
    embedder.remote = blocks
    try:
        yield blocks
    finally:
        embedder.remote = None
