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

By role: manifest (ids, the manifest, what is reusable), vectors (the store a manifest names, writing vectors),
opened (the Index object, open_index), build (build_index: reuse, update in place, or build and publish).
"""

from ragopt.index.build import BuildReport, build_index
from ragopt.index.manifest import COLLECTION, INDEX_FORMAT, Manifest, collection_name, corpus_fingerprint, index_id
from ragopt.index.opened import Index, make_embedder, open_index

__all__ = ["COLLECTION", "INDEX_FORMAT", "BuildReport", "Index", "Manifest", "build_index", "collection_name",
           "corpus_fingerprint", "index_id", "make_embedder", "open_index"]
