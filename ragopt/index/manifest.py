"""What identifies an index and what its folder says about itself: the id (format, corpus, chunker, embedder and,
for a qdrant-edge shard, its settings), the manifest, and whether a folder is a published index to reuse."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ValidationError

from ragopt.chunking import Chunker
from ragopt.backends.edge_store import ENGINE as EDGE_ENGINE
from ragopt.backends.embeddings import Embedder
from ragopt.backends.exact_store import ENGINE as EXACT_ENGINE
from ragopt.config import ChunkerConfig, StoreConfig, fingerprint
from ragopt.errors import InputError
from ragopt.types import Document
from ragopt.workspace import scratch_name

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
    # the share of chunks longer than the embedder reads (embedded from their beginning; None: not counted)
    embedder_cut: float | None = None


def write_manifest(folder: Path, manifest: Manifest) -> None:
    tmp = folder / scratch_name(".manifest")
    tmp.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    os.replace(tmp, folder / "manifest.json")


def read_manifest(path: Path) -> Manifest:
    try:
        return Manifest.model_validate(json.loads((path / "manifest.json").read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise InputError("no index here (manifest.json is missing)", path=path) from None
    except (ValueError, ValidationError):
        raise InputError("this index was written by another ragopt version: build it again", path=path / "manifest.json") from None


def identity(chunker: Chunker, embedder: Embedder, engine: str, store_config: StoreConfig) -> dict:
    """What an index id holds besides the corpus; a qdrant-edge shard's settings too (the exact store's and the
    server's ids are those of earlier versions)."""
    identity = {"format": INDEX_FORMAT, "chunker": chunker.fingerprint, "embedder": embedder.fingerprint,
                "normalize": embedder.config.normalize}
    if embedder.config.long_chunks != "truncate":  # the ids of indexes built before the knob stay as they were
        identity["long_chunks"] = embedder.config.long_chunks
    if engine == EDGE_ENGINE:
        identity["store"] = {"engine": engine, "ids": "ordered", **store_config.shard_settings()}  # hashed ids before
    return identity


def index_id(corpus_fp: str, chunker: Chunker, embedder: Embedder, engine: str = EXACT_ENGINE,
             store_config: StoreConfig | None = None) -> str:
    return fingerprint({**identity(chunker, embedder, engine, store_config or StoreConfig()), "corpus": corpus_fp})


def reusable(folder: Path) -> bool:
    """A published index under its own id, with no update of it pending."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return manifest.get("id") == folder.name and not (folder / "update.json").exists()


def collection_name(iid: str, store_config: StoreConfig | None) -> str:
    return f"ragopt_{iid}" if store_config and store_config.url else COLLECTION
