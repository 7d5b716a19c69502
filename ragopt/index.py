"""Builds and opens indexes. An index is identified by (format, corpus, chunker, embedder) fingerprints.

Building one that exists is a no-op. A build writes into a scratch folder and publishes it with one atomic
rename, so an interrupted build never leaves a half index that a later run would pick up; the embeddings it
finished stay in the cache, so the re-run only embeds what is left. Scratch folders are named
`.tmp-ID@HOST@PID` (`.vectors@HOST@PID` inside an index): a build removes those whose process on this host
is dead, so a killed build leaves nothing behind for long. An index built for BM25 alone holds no vectors;
the first dense use embeds and publishes them, again atomically (`ensure_vectors`).

Vectors live in the numpy exact store in the index folder (ragopt/backends/exact_store.py), or on a Qdrant
server when `StoreConfig.url` is set; the manifest records which.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import BaseModel, ValidationError

from ragopt.backends.exact_store import ENGINE as EXACT_ENGINE
from ragopt.backends.exact_store import ExactStore
from ragopt.backends.permission_mask import OwnerMasks
from ragopt.backends.qdrant_store import ENGINE as QDRANT_ENGINE
from ragopt.backends.qdrant_store import QdrantStore
from ragopt.cache import workspace_cache
from ragopt.config import BM25Config, ChunkerConfig, EmbedderConfig, StoreConfig, fingerprint
from ragopt.errors import InputError, TenantRequired
from ragopt.resources import Resources
from ragopt.backends.chunker import Chunker
from ragopt.backends.embeddings import Embedder
from ragopt.backends.bm25 import BM25Index, bm25_analyzer
from ragopt.backends.vector_store import VectorStore
from ragopt.text import Analyzer, ScriptShare
from ragopt.types import Chunk, Document, Hit, Query

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
    store: str  # the vector engine: "numpy-exact" (in this folder) or "qdrant" (the server at store_url)
    store_url: str | None = None


@dataclass
class BuildReport:
    index: "Index"
    reused: bool  # nothing was built: the index (and its vectors, where wanted) existed
    embedded: int  # texts the model actually embedded in this run
    cache_hits: int
    seconds: float


# -- scratch folders -------------------------------------------------------------------------------------
def scratch_name(prefix: str) -> str:
    """A scratch folder's name that says which process of which host owns it."""
    return f"{prefix}@{socket.gethostname()}@{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    try:  # a killed child its parent has not reaped yet is a zombie: dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def remove_stale_scratch(folder: Path, prefix: str) -> list[Path]:
    """Delete `prefix...@HOST@PID` entries in `folder` whose process on this host is dead (a killed build);
    live builds and other hosts' folders (a shared workspace) are left alone. Returns what was removed."""
    host, removed = socket.gethostname(), []
    for p in folder.glob(f"{prefix}*@*@*") if folder.is_dir() else []:
        _, owner_host, pid = p.name.rsplit("@", 2)
        if owner_host == host and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _write_manifest(folder: Path, manifest: Manifest) -> None:
    tmp = folder / scratch_name(".manifest")
    tmp.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    os.replace(tmp, folder / "manifest.json")


def _make_store(folder: Path, collection: str, store_config: StoreConfig, resources: Resources) -> VectorStore:
    if store_config.url:
        return QdrantStore(collection, store_config, resources)
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
        return _make_store(self.path, self.manifest.collection, self.store_config, self.resources)

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
                self.chunks, embedder, staging, self.manifest.collection, self.store_config, self.resources, progress
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


def index_id(corpus_fp: str, chunker: Chunker, embedder: Embedder) -> str:
    return fingerprint(
        {
            "format": INDEX_FORMAT,
            "corpus": corpus_fp,
            "chunker": chunker.fingerprint,
            "embedder": embedder.fingerprint,
            "normalize": embedder.config.normalize,
        }
    )


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
    """Build (or reuse) the index; `dense=False` skips embedding when only BM25 will search it. The index is
    held by `resources` (default: the embedder's), so building it again in this process returns the same
    object, with its BM25 matrices and store already open."""
    t0 = time.perf_counter()
    workspace = Path(workspace)
    resources = resources if resources is not None else embedder.resources
    store_config = store_config or StoreConfig()
    if not docs:
        raise InputError("the corpus is empty: nothing to index")
    chunker = Chunker(chunker_config, embedder.config)
    corpus_fp = corpus_fingerprint(docs)
    iid = index_id(corpus_fp, chunker, embedder)
    root = workspace / "indexes"
    final = root / iid
    remove_stale_scratch(root, ".tmp-")
    if (final / "manifest.json").exists():
        index = open_index(final, store_config, resources)
        embedded, hits = index.ensure_vectors(embedder, progress=progress) if dense else (0, 0)
        return BuildReport(index, embedded + hits == 0, embedded, hits, time.perf_counter() - t0)

    chunks = chunker.chunk_all(docs)
    tmp = root / scratch_name(f".tmp-{iid}")
    tmp.mkdir(parents=True)
    collection, dim, embedded, hits = _write_scratch(tmp, chunks, iid, embedder, store_config, resources,
                                                     dense=dense, progress=progress)
    manifest = Manifest(
        id=iid,
        corpus_fingerprint=corpus_fp,
        chunker=chunker_config,
        chunker_fingerprint=chunker.fingerprint,
        embedder_model=embedder.config.model,
        embedder_fingerprint=embedder.fingerprint,
        normalize=embedder.config.normalize,
        n_documents=len(docs),
        n_chunks=len(chunks),
        dim=dim,
        has_tenants=any(c.tenant is not None for c in chunks),
        has_scopes=any(c.scopes for c in chunks),
        build_s=time.perf_counter() - t0,
        collection=collection,
        store=QDRANT_ENGINE if store_config.url else EXACT_ENGINE,
        store_url=store_config.url,
    )
    _write_manifest(tmp, manifest)
    _publish(tmp, final)
    index = open_index(final, store_config, resources)
    return BuildReport(index, False, embedded, hits, time.perf_counter() - t0)


def _write_scratch(tmp: Path, chunks: Sequence[Chunk], iid: str, embedder: Embedder, store_config: StoreConfig,
                   resources: Resources, *, dense: bool, progress: bool) -> tuple[str, int | None, int, int]:
    """Write the chunks, and the vectors unless `dense` is False, into the scratch folder `tmp`, which is removed
    on any failure. Returns (collection, dim or None, texts embedded, cache hits)."""
    try:
        with open(tmp / "chunks.jsonl", "w", encoding="utf-8") as f:
            f.writelines(c.model_dump_json() + "\n" for c in chunks)
        collection = collection_name(iid, store_config)
        dim, embedded, hits = (
            _write_vectors(chunks, embedder, tmp, collection, store_config, resources, progress) if dense else (None, 0, 0)
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return collection, dim, embedded, hits


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
    collection: str,
    store_config: StoreConfig,
    resources: Resources,
    progress: bool,
) -> tuple[int, int, int]:
    """Embed the chunks (cached) and store them in bulk: the exact store in `folder/vectors`, or a server
    collection of its own published by pointing the `collection` alias at it. Returns (dim, texts embedded,
    cache hits)."""
    encoded = embedder.encode([c.indexed_text for c in chunks], [(c.tenant, c.scopes) for c in chunks], progress=progress)
    dim = int(encoded.vectors.shape[1])
    if not store_config.url:
        store = ExactStore(folder / "vectors")
        store.create(dim)
        store.upsert(chunks, encoded.vectors)
        store.close()
        return dim, encoded.cache_misses, encoded.cache_hits
    server = QdrantStore(f"{collection}_build{os.getpid()}", store_config, resources)
    try:
        server.create(dim)
        server.upsert(chunks, encoded.vectors)
        server.publish(collection)
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


def open_index(path: Path, store_config: StoreConfig | None = None, resources: Resources | None = None) -> Index:
    """The published index at `path`. With `resources`, one Index per folder and store is kept there (the
    same corpus in another workspace is another index); without, a new Index that owns its resources."""
    manifest = _read_manifest(path)
    store_config = store_config or StoreConfig()
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
