"""The Index object (a published index folder: its chunks, keyword matrices, permission masks and vector store,
opened lazily) and opening one, held once per folder and store by a Resources."""

from __future__ import annotations

import copy
import os
import shutil
import time
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from ragopt.backends.bm25 import BM25Index, bm25_analyzer
from ragopt.backends.edge_store import ENGINE as EDGE_ENGINE
from ragopt.backends.edge_store import EdgeStore
from ragopt.backends.embeddings import Embedder
from ragopt.backends.permission_mask import OwnerMasks
from ragopt.backends.vector_store import VectorStore
from ragopt.cache import workspace_cache
from ragopt.config import BM25Config, EmbedderConfig, StoreConfig
from ragopt.errors import InputError, TenantRequired
from ragopt.index.manifest import Manifest, read_manifest, write_manifest
from ragopt.index.vectors import make_store, write_vectors
from ragopt.resources import Resources
from ragopt.text import Analyzer, ScriptShare
from ragopt.types import Chunk, Hit, Query
from ragopt.workspace import LOCK, lock, release, remove_stale_scratch, scratch_name


class Index:
    def __init__(self, path: Path, manifest: Manifest, store_config: StoreConfig | None = None,
                 resources: Resources | None = None, held: int | None = None):
        self.path = path
        self.manifest = manifest
        self.store_config = store_config or StoreConfig()
        self._own_resources = resources is None
        self.resources = resources if resources is not None else Resources()
        self._keyword: dict[str, BM25Index] = {}
        self._held = held  # the shared lock on the folder (open_index): released by close

    @cached_property
    def store(self) -> VectorStore:
        return make_store(self.path, self.manifest, self.store_config, self.resources)

    def searched_with(self, store_config: StoreConfig) -> "Index":
        """This index searched with `store_config`'s search settings: a view sharing its open shard and chunks
        (a qdrant-edge shard); the index itself for the other stores, whose search has no such settings."""
        if self.manifest.store != EDGE_ENGINE or store_config.search_settings() == self.store_config.search_settings():
            return self
        view = copy.copy(self)
        view.__dict__ = {**self.__dict__, "store_config": store_config, "store": self.store.searched_with(store_config)}
        view._own_resources, view._held = False, None  # closing is the index's own business
        return view

    def open_store(self) -> float | None:
        """Open a qdrant-edge shard now; the seconds it took (None for the other stores, which open at first use)."""
        return self.store.open() if isinstance(self.store, EdgeStore) else None

    @cached_property
    def chunks(self) -> list[Chunk]:
        with open(self.path / "chunks.jsonl", encoding="utf-8") as f:
            return [Chunk.model_validate_json(line) for line in f]

    @cached_property
    def _masks(self) -> OwnerMasks:
        return OwnerMasks([(c.tenant, c.scopes) for c in self.chunks])

    def permission_query(self, query: Query) -> Query | None:
        """The query to filter by, or None when the index holds no tenant or scope restrictions."""
        if not (self.manifest.has_tenants or self.manifest.has_scopes):
            return None
        if self.manifest.has_tenants and query.tenant is None:
            raise TenantRequired()
        return query

    def allowed_mask(self, query: Query) -> np.ndarray | None:
        """A read-only bool mask over chunks the query may see (kept per tenant and scopes), or None when
        nothing is restricted."""
        flt = self.permission_query(query)
        return None if flt is None else self._masks(flt)

    @cached_property
    def script(self) -> ScriptShare:
        """The scripts the chunks are written in: what an "auto" analyzer and the embedder warning look at."""
        return ScriptShare(c.indexed_text for c in self.chunks)

    def analyzer(self, config: BM25Config) -> Analyzer:
        """The analyzer BM25 with `config` uses over this index; stages that match words use the same one."""
        return bm25_analyzer(config, self.script)

    def keyword(self, config: BM25Config) -> BM25Index:
        key = config.fingerprint()
        if key not in self._keyword:
            self._keyword[key] = BM25Index([c.indexed_text for c in self.chunks], config, self.analyzer(config))
        return self._keyword[key]

    def ensure_vectors(self, embedder: Embedder, *, progress: bool = True) -> tuple[int, int]:
        """Embed and publish this index's vectors if it has none yet; returns (texts embedded, cache hits).
        Local vectors are built in a scratch folder and renamed into place, then the manifest is replaced."""
        if self.manifest.dim is not None:
            return 0, 0
        t0 = time.perf_counter()
        remove_stale_scratch(self.path, ".vectors")
        remove_stale_scratch(self.path, ".manifest")
        staging = self.path / scratch_name(".vectors")
        staging.mkdir()
        try:
            dim, embedded, hits = write_vectors(
                self.chunks, embedder, staging, self.manifest, self.store_config, self.resources, progress
            )
            if (staging / "vectors").exists():
                self.store.close()
                shutil.rmtree(self.path / "vectors", ignore_errors=True)  # left by a run that died mid-publish
                os.rename(staging / "vectors", self.path / "vectors")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.manifest = self.manifest.model_copy(update={"dim": dim, "build_s": self.manifest.build_s + time.perf_counter() - t0})
        write_manifest(self.path, self.manifest)
        return embedded, hits

    def hits(self, found: Sequence[tuple[int, float]], retriever: str) -> list[Hit]:
        """(chunk position, score) pairs, best first, as ranked hits (built without validation: the index's own chunks,
        the store's float scores; a sweep builds millions)."""
        return [Hit.model_construct(chunk=self.chunks[i], score=score, rank=r, retriever=retriever)
                for r, (i, score) in enumerate(found, start=1)]

    @cached_property
    def positions(self) -> dict[str, int]:
        return {c.id: i for i, c in enumerate(self.chunks)}

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()
        if self._own_resources:
            self.resources.close()
        release(self._held)
        self._held = None


def _store_name(url: str | None) -> str:
    return f"the Qdrant server {url}" if url else "this workspace"


def open_index(path: Path, store_config: StoreConfig | None = None, resources: Resources | None = None,
               embedder: Embedder | None = None) -> Index:
    """The published index at `path`. With `resources`, one Index per folder and store is kept there (the
    same corpus in another workspace is another index); without, a new Index that owns its resources. With
    `embedder`, an index whose vectors another embedder (or dimension) wrote is refused. The Index holds a shared
    lock on its folder until it is closed, so no update changes or renames that version meanwhile (an update in
    progress is waited for: ragopt/index/build.py)."""
    store_config = store_config or StoreConfig()
    if resources is None:
        return _open(path, store_config, None, embedder)
    key = ("index", os.path.abspath(path), store_config.url)
    index = resources.get(key, lambda: _open(path, store_config, resources, embedder))
    _check(index.manifest, path, store_config, embedder)  # one held before: checked for this caller too
    return index


def _open(path: Path, store_config: StoreConfig, resources: Resources | None, embedder: Embedder | None) -> Index:
    held = lock(path / LOCK, shared=True)  # before reading: an update in progress finishes first
    try:
        manifest = read_manifest(path)
        _check(manifest, path, store_config, embedder)
    except BaseException:
        release(held)
        raise
    return Index(path, manifest, store_config, resources, held)


def _check(manifest: Manifest, path: Path, store_config: StoreConfig, embedder: Embedder | None) -> None:
    if embedder is not None and manifest.embedder_fingerprint != embedder.fingerprint:
        raise InputError(f"these vectors were written by the embedder {manifest.embedder_model} ({manifest.dim} dimensions, "
                         f"fingerprint {manifest.embedder_fingerprint}), not by {embedder.config.model} (fingerprint "
                         f"{embedder.fingerprint}): build the index again", path=path / "manifest.json")
    if manifest.store_url != store_config.url:
        raise InputError(
            f"this index keeps its vectors in {_store_name(manifest.store_url)}, not in {_store_name(store_config.url)}: "
            "use another --workspace for the other store", path=path,
        )


def make_embedder(workspace: str | Path, config: EmbedderConfig | None = None, resources: Resources | None = None) -> Embedder:
    return Embedder(config or EmbedderConfig(), workspace_cache(workspace), resources)
