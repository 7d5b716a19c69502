"""Builds and opens indexes. An index is identified by (corpus, chunker, embedder) fingerprints.

Building one that exists is a no-op. A build writes into a temporary folder and publishes it with one
atomic rename, so an interrupted build never leaves a half index that a later run would pick up; the
embeddings it finished stay in the cache, so the re-run only embeds what is left. An index built for BM25
alone holds no vectors; the first dense use embeds and publishes them, again atomically (`ensure_vectors`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np
from pydantic import BaseModel

from ragopt.cache import Cache
from ragopt.config import BM25Config, ChunkerConfig, EmbedderConfig, StoreConfig, fingerprint
from ragopt.errors import InputError, TenantRequired
from ragopt.stages.chunking import Chunker
from ragopt.stages.embedding import Embedder
from ragopt.stages.keyword import BM25Index
from ragopt.stages.vector import QdrantStore
from ragopt.tokencount import TokenCounter
from ragopt.types import Chunk, Document, Hit, Query, visible_to

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
    store_url: str | None = None  # the Qdrant server holding the vectors; None = local mode in this folder


@dataclass
class BuildReport:
    index: "Index"
    reused: bool  # nothing was built: the index (and its vectors, where wanted) existed
    embedded: int  # texts the model actually embedded in this run
    cache_hits: int
    seconds: float


class Index:
    def __init__(self, path: Path, manifest: Manifest, store_config: StoreConfig | None = None):
        self.path = path
        self.manifest = manifest
        self.store = QdrantStore(manifest.collection, str(path / "qdrant"), store_config)
        self._keyword: dict[str, BM25Index] = {}

    @cached_property
    def chunks(self) -> list[Chunk]:
        with open(self.path / "chunks.jsonl", encoding="utf-8") as f:
            return [Chunk.model_validate_json(line) for line in f]

    @cached_property
    def _owners(self) -> tuple[np.ndarray, list[tuple[str | None, tuple[str, ...]]]]:
        owners = sorted({(c.tenant, c.scopes) for c in self.chunks}, key=repr)
        position = {o: i for i, o in enumerate(owners)}
        return np.array([position[(c.tenant, c.scopes)] for c in self.chunks]), owners

    def permission_query(self, query: Query) -> Query | None:
        """The query to filter by, or None when the index holds no tenant or scope restrictions."""
        if not (self.manifest.has_tenants or self.manifest.has_scopes):
            return None
        if self.manifest.has_tenants and query.tenant is None:
            raise TenantRequired()
        return query

    def allowed_mask(self, query: Query) -> np.ndarray | None:
        """A bool mask over chunks the query may see, or None when nothing is restricted."""
        flt = self.permission_query(query)
        if flt is None:
            return None
        owner_of_chunk, owners = self._owners
        ok = np.array([visible_to(tenant, scopes, flt) for tenant, scopes in owners])
        return ok[owner_of_chunk]

    def keyword(self, config: BM25Config) -> BM25Index:
        key = config.fingerprint()
        if key not in self._keyword:
            self._keyword[key] = BM25Index([c.indexed_text for c in self.chunks], config)
        return self._keyword[key]

    def ensure_vectors(self, embedder: Embedder, *, progress: bool = True) -> tuple[int, int]:
        """Embed and publish this index's vectors if it has none yet; returns (texts embedded, cache hits).
        Local vectors are built beside the index and renamed into place, then the manifest is replaced."""
        if self.manifest.dim is not None:
            return 0, 0
        t0 = time.perf_counter()
        staging = self.path / f".vectors-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            dim, embedded, hits = _write_vectors(
                self.chunks, embedder, staging, self.manifest.collection, self.store.config, progress
            )
            if (staging / "qdrant").exists():
                self.store.close()
                shutil.rmtree(self.path / "qdrant", ignore_errors=True)  # left by a run that died mid-publish
                os.rename(staging / "qdrant", self.path / "qdrant")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.manifest = self.manifest.model_copy(update={"dim": dim, "build_s": self.manifest.build_s + time.perf_counter() - t0})
        tmp = self.path / f"manifest.json.{os.getpid()}"
        tmp.write_text(self.manifest.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, self.path / "manifest.json")
        return embedded, hits

    def hits(self, found: Sequence[tuple[int, float]], retriever: str) -> list[Hit]:
        """(chunk position, score) pairs, best first, as ranked hits."""
        return [Hit(chunk=self.chunks[i], score=score, rank=r, retriever=retriever) for r, (i, score) in enumerate(found, start=1)]

    @cached_property
    def positions(self) -> dict[str, int]:
        return {c.id: i for i, c in enumerate(self.chunks)}

    def token_counts(self, counter: TokenCounter) -> np.ndarray:
        """Tokens per chunk text by `counter`, computed once and saved beside the chunks."""
        path = self.path / f"tokens-{counter.fingerprint}.npy"
        if path.exists():
            return np.load(path)
        counts = np.array([counter.count(c.text) for c in self.chunks], dtype=np.int32)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, counts)
        os.replace(tmp, path)
        return counts

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())


def index_id(corpus_fp: str, chunker: Chunker, embedder: Embedder) -> str:
    return fingerprint(
        {
            "corpus": corpus_fp,
            "chunker": chunker.fingerprint,
            "embedder": embedder.fingerprint,
            "normalize": embedder.config.normalize,
        }
    )


_open: dict[str, Index] = {}


def build_index(
    docs: Sequence[Document],
    chunker_config: ChunkerConfig,
    embedder: Embedder,
    workspace: str | Path,
    *,
    store_config: StoreConfig | None = None,
    progress: bool = True,
    dense: bool = True,
) -> BuildReport:
    """Build (or reuse) the index; `dense=False` skips embedding when only BM25 will search it."""
    t0 = time.perf_counter()
    workspace = Path(workspace)
    if not docs:
        raise InputError("the corpus is empty: nothing to index")
    chunker = Chunker(chunker_config, embedder.config)
    corpus_fp = corpus_fingerprint(docs)
    iid = index_id(corpus_fp, chunker, embedder)
    final = workspace / "indexes" / iid
    if (final / "manifest.json").exists():
        index = open_index(final, store_config)
        embedded, hits = index.ensure_vectors(embedder, progress=progress) if dense else (0, 0)
        return BuildReport(index, embedded + hits == 0, embedded, hits, time.perf_counter() - t0)

    chunks = chunker.chunk_all(docs)
    tmp = final.parent / f".tmp-{iid}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with open(tmp / "chunks.jsonl", "w", encoding="utf-8") as f:
            for c in chunks:
                f.write(c.model_dump_json() + "\n")
        collection = collection_name(iid, store_config)
        dim, embedded, hits = _write_vectors(chunks, embedder, tmp, collection, store_config, progress) if dense else (None, 0, 0)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
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
        store_url=store_config.url if store_config else None,
    )
    (tmp / "manifest.json").write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    try:
        os.rename(tmp, final)  # the publish step: atomic on one file system
    except OSError:  # another process published the same index first; theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)
    index = open_index(final, store_config)
    return BuildReport(index, False, embedded, hits, time.perf_counter() - t0)


def collection_name(iid: str, store_config: StoreConfig | None) -> str:
    return f"ragopt_{iid}" if store_config and store_config.url else COLLECTION


def _write_vectors(
    chunks: Sequence[Chunk],
    embedder: Embedder,
    folder: Path,
    collection: str,
    store_config: StoreConfig | None,
    progress: bool,
) -> tuple[int, int, int]:
    """Embed the chunks (cached) and store them: local mode in `folder/qdrant`, a server in a collection of
    its own published by pointing the `collection` alias at it. Returns (dim, texts embedded, cache hits)."""
    encoded = embedder.encode([c.indexed_text for c in chunks], [(c.tenant, c.scopes) for c in chunks], progress=progress)
    server = bool(store_config and store_config.url)
    build_name = f"{collection}_build{os.getpid()}" if server else collection
    store = QdrantStore(build_name, str(folder / "qdrant"), store_config)
    try:
        store.create(encoded.vectors.shape[1])
        store.upsert(chunks, encoded.vectors)
        if server:
            store.publish(collection)
    except BaseException:
        if server:
            store.client.delete_collection(build_name)
        raise
    finally:
        if not server:
            store.close()  # release the folder: it is about to be renamed or deleted
    return int(encoded.vectors.shape[1]), encoded.misses, encoded.hits


def _store_name(url: str | None) -> str:
    return f"the Qdrant server {url}" if url else "local mode"


def open_index(path: Path, store_config: StoreConfig | None = None) -> Index:
    manifest = Manifest.model_validate(json.loads((path / "manifest.json").read_text(encoding="utf-8")))
    wanted = store_config.url if store_config else None
    if manifest.store_url != wanted:
        raise InputError(
            f"this index keeps its vectors in {_store_name(manifest.store_url)}, not in {_store_name(wanted)}: "
            "use another --workspace for the other store", path=path,
        )
    key = os.path.abspath(path)  # one Index per folder: the same corpus in another workspace is another index
    if key not in _open:
        _open[key] = Index(path, manifest, store_config)
    return _open[key]


def default_cache(workspace: str | Path) -> Cache:
    return Cache(Path(workspace) / "cache")


def make_embedder(workspace: str | Path, config: EmbedderConfig | None = None) -> Embedder:
    return Embedder(config or EmbedderConfig(), default_cache(workspace))
