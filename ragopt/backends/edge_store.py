"""Approximate vector search in process through Qdrant Edge (`qdrant-edge-py`: the Qdrant server's own engine as a
library, a shard in a local folder): HNSW over the vectors, int8 scalar quantization with rescoring by the original
vectors, and keyword payload indexes on tenant and scopes, so a permission filter is applied inside the graph walk
(never by cutting a top K afterwards: a small tenant's query still finds K of its own hits).

Files in the store's folder: shard/ (Qdrant's segments, WAL and payload indexes), ids.npy (the point id of each
chunk position) and keys.npy (each position's key: a hash of its chunk's full record, text, document, tenant and
scopes). Point ids are small integers handed out in order (the chunk positions of the first build, then the next
free ones): Qdrant's graph kept its recall with those and lost it with hashed ids (0.80 against 0.99 at 100k rows,
docs/vector-stores.md). The keys say what changed: a changed chunk is a new key, so the difference between two
chunk lists is two set differences of keys (ragopt/index_update.py).

Memory: the original float32 vectors stay on disk (memory-mapped, read only to rescore a few candidates), the
int8 copy (a quarter of the size) and the graph are what a search walks. `StoreConfig` holds the knobs (m,
ef_construct, ef, quantization, oversampling).
"""

from __future__ import annotations

import hashlib
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ragopt.backends.exact_store import save_npy, unit_vectors
from ragopt.backends.qdrant_store import owner_payload, permission_values
from ragopt.config import StoreConfig
from ragopt.types import Chunk, Query
from ragopt.workspace import kill_point

ENGINE = "qdrant-edge"
SHARD = "shard"
IDS = "ids.npy"
KEYS = "keys.npy"
_ID_MASK = (1 << 63) - 1  # ids stay below 2**63: signed 64-bit everywhere
_BATCH = 1000
INDEXING_THRESHOLD_KB = 1000


def chunk_keys(chunks: Sequence[Chunk]) -> np.ndarray:
    """Each chunk's key: 63 bits of a hash of its whole record (a changed chunk gets another key)."""
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(c.model_dump_json().encode(), digest_size=8).digest(), "big") & _ID_MASK for c in chunks),
        dtype=np.int64, count=len(chunks),
    )


def shard_config(dim: int, config: StoreConfig) -> Any:
    import qdrant_edge as qe

    quantization = None
    if config.quantization == "int8":
        quantization = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, memory=qe.Memory.Pinned)
    return qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine,
                                    memory=qe.Memory.Cold if quantization is not None else qe.Memory.Cached),
        hnsw_config=qe.HnswIndexConfig(m=config.hnsw_m, ef_construct=config.hnsw_ef_construct, full_scan_threshold=10_000),
        quantization_config=quantization,
        # one graph to walk with one thread per query; a graph from about 650 vectors up (Qdrant's default waits for
        # 10 MB), so a shard chosen by name is searched through HNSW as a large one is
        optimizers=qe.EdgeOptimizersConfig(default_segment_number=1, indexing_threshold=INDEXING_THRESHOLD_KB),
        max_search_threads=1,
    )


class EdgeStore:
    """create / upsert / delete / search / count / close over a folder; `open_s` says what opening the shard cost."""

    engine = ENGINE

    def __init__(self, folder: str | Path, config: StoreConfig | None = None):
        self.folder = Path(folder)
        self.config = config or StoreConfig(engine=ENGINE)
        self.open_s: float | None = None
        self.borrowed = False  # a view of another store's open shard (searched_with): closing it closes nothing

    def searched_with(self, config: StoreConfig) -> "EdgeStore":
        """This shard, opened once, searched with `config`'s search settings (ef, rescore, oversampling, exact):
        a sweep compares them without opening the shard again."""
        view = EdgeStore(self.folder, config)
        view.__dict__.update({name: getattr(self, name) for name in ("_shard", "_ids", "_keys", "_lookup")})
        view.open_s, view.borrowed = self.open_s, True
        return view

    # -- reading ---------------------------------------------------------------------------------------
    @cached_property
    def _shard(self) -> Any:
        import qdrant_edge as qe

        t0 = time.perf_counter()
        shard = qe.EdgeShard.load(str(self.folder / SHARD))
        self.open_s = time.perf_counter() - t0
        return shard

    @cached_property
    def _ids(self) -> np.ndarray:
        path = self.folder / IDS
        return np.load(path) if path.exists() else np.zeros(0, dtype=np.int64)

    @cached_property
    def _keys(self) -> np.ndarray:
        path = self.folder / KEYS
        return np.load(path) if path.exists() else np.zeros(0, dtype=np.int64)

    @cached_property
    def _lookup(self) -> tuple[np.ndarray, np.ndarray]:
        """(point ids sorted, the chunk position of each)."""
        order = np.argsort(self._ids, kind="stable")
        return self._ids[order], order

    def open(self) -> float:
        """Open the shard now (it opens on first use otherwise); the seconds it took."""
        self._shard  # noqa: B018
        self._lookup  # noqa: B018
        return self.open_s or 0.0

    def positions_of(self, ids: Sequence[int]) -> list[int | None]:
        """The chunk position of each point id; None for a point this index's chunk list does not hold (one an
        interrupted update left behind: ragopt/index_update.py completes it)."""
        sorted_ids, order = self._lookup
        if not sorted_ids.size:
            return [None] * len(ids)
        at = np.minimum(np.searchsorted(sorted_ids, np.asarray(ids, dtype=np.int64)), sorted_ids.size - 1)
        return [int(order[a]) if sorted_ids[a] == i else None for a, i in zip(at, ids)]

    def _filter(self, query: Query) -> Any:
        import qdrant_edge as qe

        tenants, scopes = permission_values(query)
        return qe.Filter(must=[qe.FieldCondition(key="tenant", match=qe.MatchAny(any=tenants)),
                               qe.FieldCondition(key="scopes", match=qe.MatchAny(any=scopes))])

    def _params(self, full_scan: bool = False) -> Any:
        import qdrant_edge as qe

        c = self.config
        quantization = None
        if c.quantization == "int8":
            quantization = qe.QuantizationSearchParams(rescore=c.rescore, oversampling=c.oversampling)
        return qe.SearchParams(hnsw_ef=c.hnsw_ef, exact=c.exact or full_scan, quantization=quantization)

    def search(self, vector: np.ndarray, k: int, query: Query | None) -> list[tuple[int, float]]:
        """(chunk position, cosine) of the k best chunks `query` may see (None: unrestricted), best first, ties by
        position."""
        import qdrant_edge as qe

        if k <= 0:
            return []
        q = unit_vectors(vector).tolist()
        where = self._filter(query) if query is not None else None

        def nearest(params: Any) -> list[Any]:
            return self._shard.query(qe.QueryRequest(limit=k, query=qe.Query.Nearest(q), filter=where, params=params, with_payload=False))

        points = nearest(self._params())
        if len(points) < k and not self.config.exact:
            # a graph walk can strand in a cluster of near-duplicates the filter thins out (1 hit of 10 at 50k rows,
            # docs/vector-stores.md): a short list is searched again by a full scan of what the query may see, so it
            # is short only when fewer than k such chunks exist
            points = nearest(self._params(full_scan=True))
        found = [(p, float(s.score)) for p, s in zip(self.positions_of([int(s.id) for s in points]), points) if p is not None]
        return sorted(found, key=lambda f: (-f[1], f[0]))

    def count(self) -> int:
        import qdrant_edge as qe

        return int(self._shard.count(qe.CountRequest(exact=True))) if (self.folder / SHARD).exists() else 0

    # -- writing ---------------------------------------------------------------------------------------
    def create(self, dim: int) -> None:
        """A new, empty shard with this store's settings and the permission payload indexes."""
        import qdrant_edge as qe

        self.folder.mkdir(parents=True, exist_ok=True)
        shard = qe.EdgeShard.create(str(self.folder / SHARD), shard_config(dim, self.config))
        for field in ("tenant", "scopes"):
            shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
        self.__dict__["_shard"] = shard

    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray, first_index: int = 0) -> None:
        """Points for the chunks at positions first_index.. (idempotent: a position is its point's id), their
        ids and keys recorded; the graph is built by `optimize`."""
        known = self._ids
        if first_index > known.size:
            raise ValueError(f"upsert at position {first_index} would leave a gap after {known.size} points")
        ids = np.arange(first_index, first_index + len(chunks), dtype=np.int64)
        self.put_points(ids, chunks, vectors)
        keys = self._keys
        self.write_ids(np.concatenate([known[:first_index], ids, known[first_index + len(ids):]]),
                       np.concatenate([keys[:first_index], chunk_keys(chunks), keys[first_index + len(ids):]]))

    def put_points(self, ids: np.ndarray, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """Upsert points (id, vector, owner payload) in batches, without touching ids.npy."""
        import qdrant_edge as qe

        vectors = unit_vectors(vectors)
        for b in range(0, len(chunks), _BATCH):
            points = [qe.Point(int(ids[i]), vectors[i].tolist(), owner_payload(chunks[i]))
                      for i in range(b, min(b + _BATCH, len(chunks)))]
            self._shard.update(qe.UpdateOperation.upsert_points(points))

    def delete(self, ids: Sequence[int]) -> None:
        import qdrant_edge as qe

        ids = [int(i) for i in ids]
        for b in range(0, len(ids), _BATCH):
            self._shard.update(qe.UpdateOperation.delete_points(ids[b : b + _BATCH]))

    def apply(self, removed: Sequence[int], ids: np.ndarray, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """An update in place: delete the `removed` point ids, upsert the chunks as points `ids`, flush.
        Idempotent: re-applying it after an interruption completes it. The graph is not rebuilt: new points are
        searched in a small appendable segment beside it, so the cost follows the change, not the index. The
        caller records every position's id and key afterwards (`write_ids`)."""
        self.delete(removed)
        kill_point("points")  # crash tests: deleted, not yet added, nothing flushed
        self.put_points(ids, chunks, vectors)
        self.flush()

    @property
    def ids(self) -> np.ndarray:
        """The point id of each chunk position (read-only)."""
        view = self._ids.view()
        view.flags.writeable = False
        return view

    @property
    def keys(self) -> np.ndarray:
        """The key of each chunk position (read-only)."""
        view = self._keys.view()
        view.flags.writeable = False
        return view

    def write_ids(self, ids: np.ndarray, keys: np.ndarray, suffix: str = "") -> None:
        """Record every position's point id and key (`suffix`: beside the current files, for a commit later)."""
        save_npy(self.folder / f"{IDS}{suffix}", np.asarray(ids, dtype=np.int64))
        save_npy(self.folder / f"{KEYS}{suffix}", np.asarray(keys, dtype=np.int64))
        for attr in ("_ids", "_keys", "_lookup"):
            self.__dict__.pop(attr, None)

    def optimize(self) -> None:
        """Build the HNSW graph and the quantized vectors over what was written, and flush to disk."""
        self._shard.optimize()
        self._shard.flush()

    def flush(self) -> None:
        self._shard.flush()

    def close(self) -> None:
        shard = self.__dict__.pop("_shard", None)
        if shard is not None and not self.borrowed:
            shard.close()
        for attr in ("_ids", "_keys", "_lookup"):
            self.__dict__.pop(attr, None)
