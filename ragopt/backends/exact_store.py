"""Exact vector search in numpy: an index's vectors in one float32 matrix, memory-mapped, searched with one
matrix-vector product over the rows the query may see.

Rows are stored grouped by owner (tenant, scopes), so a tenant's filtered query reads only its own and the
shared rows: contiguous slices, no per-query gather and no scoring of rows that would be thrown away. Which
groups a query may see is decided once per (tenant, scopes) and kept (`OwnerMasks`). Scores are cosines
(rows and query are normalized). Nothing is approximated, so recall against brute force is 1.0 by
construction, and the order is total: score descending, then chunk position, so a shorter list is always
the head of a longer one, ties included.

Files in the store's folder: vectors.npy (rows), positions.npy (the chunk position of each row) and
owners.json (each owner group and its row range).
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from ragopt.backends.permission_mask import Owner, OwnerMasks
from ragopt.types import Chunk, Query

ENGINE = "numpy-exact"


def candidates_at_cutoff(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best scores plus every score tied with the k-th (unordered): a partition, not a sort."""
    n = scores.size
    if k >= n:
        return np.arange(n)
    kth = np.partition(scores, n - k)[n - k]
    return np.flatnonzero(scores >= kth)


def total_order(scores: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best by score descending, ties by ascending id: the same input, the same list."""
    return np.lexsort((ids, -scores))[:k]


def unit_vectors(vectors: np.ndarray) -> np.ndarray:
    """Each vector scaled to length 1 (a zero vector stays zero): cosine by dot product."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


class ExactStore:
    """create / upsert / search / count / close over a folder; the folder is written in bulk by `upsert`."""

    engine = ENGINE

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    # -- reading ---------------------------------------------------------------------------------------
    @cached_property
    def _matrix(self) -> np.ndarray:
        return np.asarray(np.load(self.folder / "vectors.npy", mmap_mode="r"))

    @cached_property
    def _positions(self) -> np.ndarray:
        return np.load(self.folder / "positions.npy")

    @cached_property
    def _groups(self) -> tuple[list[Owner], np.ndarray, np.ndarray]:
        """(owner of each group, first row of each group, end row of each group)."""
        data = json.loads((self.folder / "owners.json").read_text(encoding="utf-8"))
        owners = [(g["tenant"], tuple(g["scopes"])) for g in data]
        return owners, np.array([g["start"] for g in data], dtype=np.int64), np.array([g["end"] for g in data], dtype=np.int64)

    @cached_property
    def _group_masks(self) -> OwnerMasks:
        return OwnerMasks(self._groups[0])

    def count(self) -> int:
        return int(self._positions.size) if (self.folder / "positions.npy").exists() else 0

    def _visible_ranges(self, query: Query | None) -> list[tuple[int, int]]:
        """Row ranges the query may see, adjacent groups merged; everything when `query` is None."""
        _, starts, ends = self._groups
        if query is None:
            return [(0, int(ends[-1]))] if ends.size else []
        ranges: list[tuple[int, int]] = []
        for g in np.flatnonzero(self._group_masks(query)):
            s, e = int(starts[g]), int(ends[g])
            if ranges and ranges[-1][1] == s:
                ranges[-1] = (ranges[-1][0], e)
            else:
                ranges.append((s, e))
        return ranges

    def search(self, vector: np.ndarray, k: int, query: Query | None) -> list[tuple[int, float]]:
        """(chunk position, cosine) of the k best rows `query` may see (None: no restriction), best first."""
        ranges = self._visible_ranges(query)
        if not ranges or k <= 0:
            return []
        q = unit_vectors(vector)
        matrix = self._matrix
        scores = np.concatenate([matrix[s:e] @ q for s, e in ranges]) if len(ranges) > 1 else matrix[ranges[0][0] : ranges[0][1]] @ q
        local = candidates_at_cutoff(scores, k)
        # local index -> row: each range's rows follow the previous ranges' rows in `scores`
        offsets = np.cumsum([0] + [e - s for s, e in ranges])
        which = np.searchsorted(offsets, local, side="right") - 1
        rows = np.array([r[0] for r in ranges], dtype=np.int64)[which] + (local - offsets[which])
        positions = self._positions[rows]
        best = total_order(scores[local], positions, k)
        return [(int(positions[i]), float(scores[local[i]])) for i in best]

    # -- writing ---------------------------------------------------------------------------------------
    def create(self, dim: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._dim = dim

    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray, first_index: int = 0) -> None:
        """Set the vectors of chunk positions first_index.. (replacing what was there), then rewrite the
        files in bulk, rows grouped by owner. Writing the same chunks twice changes nothing."""
        vectors = unit_vectors(vectors)
        old_vectors, old_owners = self._by_position()
        if first_index > len(old_owners):
            raise ValueError(f"upsert at position {first_index} would leave a gap after {len(old_owners)} rows")
        n = max(len(old_owners), first_index + len(chunks))
        dim = vectors.shape[1] if vectors.size else (old_vectors.shape[1] if old_vectors.size else self._dim)
        by_position = np.zeros((n, dim), dtype=np.float32)
        if old_owners:
            by_position[: len(old_owners)] = old_vectors
        by_position[first_index : first_index + len(chunks)] = vectors
        owners = old_owners + [None] * (n - len(old_owners))
        for j, c in enumerate(chunks):
            owners[first_index + j] = (c.tenant, tuple(c.scopes))
        self._write(by_position, owners)  # type: ignore[arg-type]

    def _by_position(self) -> tuple[np.ndarray, list[Owner]]:
        if not (self.folder / "positions.npy").exists():
            return np.zeros((0, 0), dtype=np.float32), []
        positions = self._positions
        vectors = np.empty_like(np.asarray(self._matrix))
        vectors[positions] = self._matrix
        owners: list[Owner] = [(None, ())] * positions.size
        group_owners, starts, ends = self._groups
        for owner, s, e in zip(group_owners, starts, ends):
            for p in positions[s:e]:
                owners[p] = owner
        return vectors, owners

    def _write(self, by_position: np.ndarray, owners: list[Owner]) -> None:
        distinct = sorted(set(owners), key=repr)
        group_of = {o: g for g, o in enumerate(distinct)}
        group = np.fromiter((group_of[o] for o in owners), dtype=np.int32, count=len(owners))
        order = np.argsort(group, kind="stable")  # rows grouped by owner, chunk order inside a group
        bounds = np.searchsorted(group[order], np.arange(len(distinct) + 1))
        groups = [{"tenant": o[0], "scopes": list(o[1]), "start": int(bounds[g]), "end": int(bounds[g + 1])} for g, o in enumerate(distinct)]
        self.close()
        self.folder.mkdir(parents=True, exist_ok=True)
        save_npy(self.folder / "vectors.npy", by_position[order])
        save_npy(self.folder / "positions.npy", order.astype(np.int64))
        tmp = self.folder / f"owners.json.{os.getpid()}"
        tmp.write_text(json.dumps(groups), encoding="utf-8")
        os.replace(tmp, self.folder / "owners.json")

    def close(self) -> None:
        """Forget the memory map and cached groups (they are re-read on next use)."""
        for name in ("_matrix", "_positions", "_groups", "_group_masks"):
            self.__dict__.pop(name, None)


def save_npy(path: Path, array: np.ndarray) -> None:
    """Write an .npy file atomically: readers see the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)
