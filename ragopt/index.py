"""Builds and opens indexes. An index is identified by (format, corpus, chunker, embedder) fingerprints.

Building one that exists is a no-op. A build writes into a scratch folder and publishes it with one atomic
rename, so an interrupted build never leaves a half index that a later run would pick up; the embeddings it
finished stay in the cache, so the re-run only embeds what is left. Scratch folders are named
`.tmp-ID@HOST@PID` (`.vectors@HOST@PID` inside an index): a build removes those whose process on this host
is dead, so a killed build leaves nothing behind for long. An index built for BM25 alone holds no vectors;
the first dense use embeds and publishes them, again atomically (`ensure_vectors`).

Vectors live in the numpy exact store in the index folder (ragopt/backends/exact_store.py), in a qdrant-edge shard
there (ragopt/backends/edge_store.py: HNSW, chosen by `StoreConfig.engine`, "auto" from AUTO_EDGE_MIN_CHUNKS chunks
up; its shard settings are part of the index id), or on a Qdrant server when `StoreConfig.url` is set; the manifest
records which. A qdrant-edge index of a changed corpus is updated in place (ragopt/index_update.py).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import BaseModel, ValidationError

from ragopt.backends.edge_store import ENGINE as EDGE_ENGINE
from ragopt.backends.edge_store import EdgeStore
from ragopt.backends.exact_store import ENGINE as EXACT_ENGINE
from ragopt.backends.exact_store import ExactStore
from ragopt.backends.permission_mask import OwnerMasks
from ragopt.backends.qdrant_store import ENGINE as QDRANT_ENGINE
from ragopt.backends.qdrant_store import QdrantStore
from ragopt.cache import workspace_cache
from ragopt.config import BM25Config, ChunkerConfig, EmbedderConfig, StoreConfig, fingerprint
from ragopt.errors import InputError, TenantRequired
from ragopt.index_update import apply_update, clear_journal, finish_commit, plan_update
from ragopt.resources import Resources
from ragopt.backends.chunker import Chunker
from ragopt.backends.embeddings import Embedder
from ragopt.backends.bm25 import BM25Index, bm25_analyzer
from ragopt.backends.vector_store import VectorStore
from ragopt.text import Analyzer, ScriptShare
from ragopt.types import Chunk, Document, Hit, Query
from ragopt.workspace import remove_stale_scratch, scratch_name

# Part of every index id. 2: vectors in the numpy exact store (1 kept them in qdrant-client's local mode,
# which this version no longer reads: such indexes are simply not found, and are rebuilt).
INDEX_FORMAT = 2
COLLECTION = "chunks"


def corpus_fingerprint(docs: Sequence[Document]) -> str:
    return fingerprint([d.model_dump(mode="json") for d in docs])


class Manifest(BaseModel):
    id: str
    corpus_fingerprint: str
    chunker: ChunkerConfig
    chunker_fingerprint: str
    embedder_model: str
    embedder_fingerprint: str
    normalize: bool
    n_documents: int
    n_chunks: int
    dim: int | None  # None until vectors are published
    has_tenants: bool
    has_scopes: bool
    build_s: float
    collection: str
    store: str  # the vector engine: "numpy-exact" or "qdrant-edge" (in this folder), "qdrant" (the server at store_url)
    store_url: str | None = None
    lineage: str | None = None  # qdrant-edge: the id of everything but the corpus (ragopt/index_update.py)


@dataclass
class BuildReport:
    index: "Index"
    reused: bool  # nothing was built: the index (and its vectors, where wanted) existed
    embedded: int  # texts the model actually embedded in this run
    cache_hits: int
    seconds: float
    updated: tuple[int, int] | None = None  # an update in place of the previous version: (points removed, added)


def _write_manifest(folder: Path, manifest: Manifest) -> None:
    tmp = folder / scratch_name(".manifest")
    tmp.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    os.replace(tmp, folder / "manifest.json")


def _make_store(folder: Path, manifest: Manifest, store_config: StoreConfig, resources: Resources) -> VectorStore:
    if manifest.store == QDRANT_ENGINE:
        return QdrantStore(manifest.collection, store_config, resources)
    if manifest.store == EDGE_ENGINE:
        return EdgeStore(folder / "vectors", store_config)
    return ExactStore(folder / "vectors")


class Index:
    def __init__(
        self, path: Path, manifest: Manifest, store_config: StoreConfig | None = None, resources: Resources | None = None
    ):
        self.path = path
        self.manifest = manifest
        self.store_config = store_config or StoreConfig()
        self._own_resources = resources is None
        self.resources = resources if resources is not None else Resources()
        self._keyword: dict[str, BM25Index] = {}

    @cached_property
    def store(self) -> VectorStore:
        return _make_store(self.path, self.manifest, self.store_config, self.resources)

    def searched_with(self, store_config: StoreConfig) -> "Index":
        """This index searched with `store_config`'s search settings: a view sharing its open shard and chunks
        (a qdrant-edge shard); the index itself for the other stores, whose search has no such settings."""
        if self.manifest.store != EDGE_ENGINE or store_config.search_settings() == self.store_config.search_settings():
            return self
        view = copy.copy(self)
        view.__dict__ = {**self.__dict__, "store_config": store_config, "store": self.store.searched_with(store_config)}
        view._own_resources = False  # closing is the index's own business
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
            dim, embedded, hits = _write_vectors(
                self.chunks, embedder, staging, self.manifest, self.store_config, self.resources, progress
            )
            if (staging / "vectors").exists():
                self.store.close()
                shutil.rmtree(self.path / "vectors", ignore_errors=True)  # left by a run that died mid-publish
                os.rename(staging / "vectors", self.path / "vectors")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.manifest = self.manifest.model_copy(update={"dim": dim, "build_s": self.manifest.build_s + time.perf_counter() - t0})
        _write_manifest(self.path, self.manifest)
        return embedded, hits

    def hits(self, found: Sequence[tuple[int, float]], retriever: str) -> list[Hit]:
        """(chunk position, score) pairs, best first, as ranked hits."""
        return [Hit(chunk=self.chunks[i], score=score, rank=r, retriever=retriever) for r, (i, score) in enumerate(found, start=1)]

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


def _identity(chunker: Chunker, embedder: Embedder, engine: str, store_config: StoreConfig) -> dict:
    """What an index id holds besides the corpus; a qdrant-edge shard's settings too (the exact store's and the
    server's ids are those of earlier versions)."""
    identity = {"format": INDEX_FORMAT, "chunker": chunker.fingerprint, "embedder": embedder.fingerprint,
                "normalize": embedder.config.normalize}
    if engine == EDGE_ENGINE:
        identity["store"] = {"engine": engine, "ids": "ordered", **store_config.shard_settings()}  # hashed ids before
    return identity


def index_id(corpus_fp: str, chunker: Chunker, embedder: Embedder, engine: str = EXACT_ENGINE,
             store_config: StoreConfig | None = None) -> str:
    return fingerprint({**_identity(chunker, embedder, engine, store_config or StoreConfig()), "corpus": corpus_fp})


def _reusable(folder: Path) -> bool:
    """A published index under its own id, with no update of it pending."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return manifest.get("id") == folder.name and not (folder / "update.json").exists()


def build_index(
    docs: Sequence[Document],
    chunker_config: ChunkerConfig,
    embedder: Embedder,
    workspace: str | Path,
    *,
    store_config: StoreConfig | None = None,
    progress: bool = True,
    dense: bool = True,
    resources: Resources | None = None,
) -> BuildReport:
    """Build (or reuse, or update in place) the index; `dense=False` skips embedding when only BM25 will search
    it. The index is held by `resources` (default: the embedder's), so building it again in this process returns
    the same object, with its BM25 matrices and store already open."""
    t0 = time.perf_counter()
    workspace = Path(workspace)
    resources = resources if resources is not None else embedder.resources
    store_config = store_config or StoreConfig()
    if not docs:
        raise InputError("the corpus is empty: nothing to index")
    chunker = Chunker(chunker_config, embedder.config)
    corpus_fp = corpus_fingerprint(docs)
    root = workspace / "indexes"
    remove_stale_scratch(root, ".tmp-")
    engines = [EXACT_ENGINE, EDGE_ENGINE] if store_config.engine == "auto" and not store_config.url else [store_config.resolved(0)]
    for engine in engines:  # "auto" reuses whichever it built before
        final = root / index_id(corpus_fp, chunker, embedder, engine, store_config)
        if _reusable(final):
            index = open_index(final, store_config, resources, embedder)
            embedded, hits = index.ensure_vectors(embedder, progress=progress) if dense else (0, 0)
            return BuildReport(index, embedded + hits == 0, embedded, hits, time.perf_counter() - t0)

    chunks = chunker.chunk_all(docs)
    engine = store_config.resolved(len(chunks))
    iid = index_id(corpus_fp, chunker, embedder, engine, store_config)
    lineage = fingerprint(_identity(chunker, embedder, engine, store_config)) if engine == EDGE_ENGINE else None
    manifest = Manifest(
        id=iid, corpus_fingerprint=corpus_fp, chunker=chunker_config, chunker_fingerprint=chunker.fingerprint,
        embedder_model=embedder.config.model, embedder_fingerprint=embedder.fingerprint, normalize=embedder.config.normalize,
        n_documents=len(docs), n_chunks=len(chunks), dim=None, has_tenants=any(c.tenant is not None for c in chunks),
        has_scopes=any(c.scopes for c in chunks), build_s=0.0, collection=collection_name(iid, store_config), store=engine,
        store_url=store_config.url, lineage=lineage,
    )  # fmt: skip
    if lineage is not None and dense:
        report = _update_in_place(root, manifest, chunks, embedder, store_config, resources, progress, t0)
        if report is not None:
            return report
    tmp = root / scratch_name(f".tmp-{iid}")
    tmp.mkdir(parents=True)
    dim, embedded, hits = _write_scratch(tmp, chunks, manifest, embedder, store_config, resources, dense=dense, progress=progress)
    _write_manifest(tmp, manifest.model_copy(update={"dim": dim, "build_s": time.perf_counter() - t0}))
    _publish(tmp, root / iid)
    index = open_index(root / iid, store_config, resources, embedder)
    return BuildReport(index, False, embedded, hits, time.perf_counter() - t0)


def _update_in_place(root: Path, manifest: Manifest, chunks: Sequence[Chunk], embedder: Embedder, store_config: StoreConfig,
                     resources: Resources, progress: bool, t0: float) -> BuildReport | None:
    """The previous version of this qdrant-edge index (same lineage) changed into this one, when there is one
    close enough (ragopt/index_update.py); None otherwise."""
    candidates = []
    for folder in root.glob("*/manifest.json") if root.is_dir() else []:
        if not folder.parent.name.startswith(".") and json.loads(folder.read_text(encoding="utf-8")).get("lineage") == manifest.lineage:
            finish_commit(folder.parent)  # a run killed while renaming its files
            candidates.append(folder.parent)
    plan = plan_update(candidates, chunks)
    if plan is None:
        return None
    resources.drop(("index", os.path.abspath(plan.folder), store_config.url))  # this process may hold it open
    store = EdgeStore(plan.folder / "vectors", store_config)
    dim = _read_manifest(plan.folder).dim
    done = manifest.model_copy(update={"dim": dim, "build_s": time.perf_counter() - t0})
    try:
        embedded, hits = apply_update(plan, chunks, embedder, store, done.model_dump_json(indent=2), progress=progress)
    finally:
        store.close()
    final = root / manifest.id
    if plan.folder != final:
        shutil.rmtree(final, ignore_errors=True)  # an older state of this lineage under the new id: superseded
        os.rename(plan.folder, final)
    clear_journal(final)
    index = open_index(final, store_config, resources, embedder)
    return BuildReport(index, False, embedded, hits, time.perf_counter() - t0, updated=(len(plan.removed), len(plan.added)))


def _write_scratch(tmp: Path, chunks: Sequence[Chunk], manifest: Manifest, embedder: Embedder, store_config: StoreConfig,
                   resources: Resources, *, dense: bool, progress: bool) -> tuple[int | None, int, int]:
    """Write the chunks, and the vectors unless `dense` is False, into the scratch folder `tmp`, which is removed
    on any failure. Returns (dim or None, texts embedded, cache hits)."""
    try:
        with open(tmp / "chunks.jsonl", "w", encoding="utf-8") as f:
            f.writelines(c.model_dump_json() + "\n" for c in chunks)
        if not dense:
            return None, 0, 0
        return _write_vectors(chunks, embedder, tmp, manifest, store_config, resources, progress)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _publish(tmp: Path, final: Path) -> None:
    """Move the finished scratch folder to its final name."""
    try:
        os.rename(tmp, final)  # the publish step: atomic on one file system
    except OSError:  # another process published the same index first; theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)


def collection_name(iid: str, store_config: StoreConfig | None) -> str:
    return f"ragopt_{iid}" if store_config and store_config.url else COLLECTION


def _write_vectors(
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


def _store_name(url: str | None) -> str:
    return f"the Qdrant server {url}" if url else "this workspace"


def _read_manifest(path: Path) -> Manifest:
    try:
        return Manifest.model_validate(json.loads((path / "manifest.json").read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise InputError("no index here (manifest.json is missing)", path=path) from None
    except (ValueError, ValidationError):
        raise InputError("this index was written by another ragopt version: build it again", path=path / "manifest.json") from None


def open_index(path: Path, store_config: StoreConfig | None = None, resources: Resources | None = None,
               embedder: Embedder | None = None) -> Index:
    """The published index at `path`. With `resources`, one Index per folder and store is kept there (the
    same corpus in another workspace is another index); without, a new Index that owns its resources. With
    `embedder`, an index whose vectors another embedder (or dimension) wrote is refused."""
    manifest = _read_manifest(path)
    store_config = store_config or StoreConfig()
    if embedder is not None and manifest.embedder_fingerprint != embedder.fingerprint:
        raise InputError(f"these vectors were written by the embedder {manifest.embedder_model} ({manifest.dim} dimensions, "
                         f"fingerprint {manifest.embedder_fingerprint}), not by {embedder.config.model} (fingerprint "
                         f"{embedder.fingerprint}): build the index again", path=path / "manifest.json")
    if manifest.store_url != store_config.url:
        raise InputError(
            f"this index keeps its vectors in {_store_name(manifest.store_url)}, not in {_store_name(store_config.url)}: "
            "use another --workspace for the other store", path=path,
        )
    if resources is None:
        return Index(path, manifest, store_config)
    key = ("index", os.path.abspath(path), store_config.url)
    return resources.get(key, lambda: Index(path, manifest, store_config, resources))


def make_embedder(workspace: str | Path, config: EmbedderConfig | None = None, resources: Resources | None = None) -> Embedder:
    return Embedder(config or EmbedderConfig(), workspace_cache(workspace), resources)
