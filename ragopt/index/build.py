"""Building an index: reuse a published one, update a qdrant-edge one in place, or write a new one in a scratch
folder and publish it with one atomic rename."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ragopt.chunking import Chunker
from ragopt.backends.edge_store import ENGINE as EDGE_ENGINE
from ragopt.backends.edge_store import EdgeStore
from ragopt.backends.embeddings import Embedder
from ragopt.backends.exact_store import ENGINE as EXACT_ENGINE
from ragopt.config import ChunkerConfig, StoreConfig, fingerprint
from ragopt.errors import InputError
from ragopt.index.manifest import (Manifest, collection_name, corpus_fingerprint, identity, index_id, read_manifest,
                                   reusable, write_manifest)
from ragopt.index.opened import Index, open_index
from ragopt.index.vectors import write_vectors
from ragopt.index_update import UpdatePlan, apply_update, clear_journal, finish_commit, plan_update
from ragopt.resources import Resources
from ragopt.types import Chunk, Document
from ragopt.workspace import LOCK, kill_point, lock, release, remove_stale_scratch, scratch_name


@dataclass
class BuildReport:
    index: "Index"
    reused: bool  # nothing was built: the index (and its vectors, where wanted) existed
    embedded: int  # texts the model actually embedded in this run
    cache_hits: int
    seconds: float
    updated: tuple[int, int] | None = None  # an update in place of the previous version: (points removed, added)

    def reach_warning(self, embedder: Embedder) -> str | None:
        """A warning (a line, and an indented line on what to do) when some chunks are longer than the embedder
        reads and it embeds their beginning only. Two lines so that a terminal of 120 columns shows it whole."""
        share = self.index.manifest.embedder_cut
        if not share or embedder.config.long_chunks != "truncate":
            return None
        m = self.index.manifest
        return (f"warning: {share:.0%} of the {m.n_chunks:,} chunks ({m.chunker.label}) are longer than the embedder "
                f"{m.embedder_model} reads ({embedder.reach} word pieces):\n    only their beginning is embedded; smaller "
                "chunks fit, or --long-chunks mean embeds their windows' mean")


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
    chunker = Chunker(chunker_config, embedder=embedder)
    corpus_fp = corpus_fingerprint(docs)
    root = workspace / "indexes"
    remove_stale_scratch(root, ".tmp-")
    engines = [EXACT_ENGINE, EDGE_ENGINE] if store_config.engine == "auto" and not store_config.url else [store_config.resolved(0)]
    for engine in engines:  # "auto" reuses whichever it built before
        final = root / index_id(corpus_fp, chunker, embedder, engine, store_config)
        if reusable(final):
            index = open_index(final, store_config, resources, embedder)
            embedded, hits = index.ensure_vectors(embedder, progress=progress) if dense else (0, 0)
            return BuildReport(index, embedded + hits == 0, embedded, hits, time.perf_counter() - t0)

    chunks = chunker.chunk_all(docs)
    engine = store_config.resolved(len(chunks))
    iid = index_id(corpus_fp, chunker, embedder, engine, store_config)
    lineage = fingerprint(identity(chunker, embedder, engine, store_config)) if engine == EDGE_ENGINE else None
    manifest = Manifest(
        id=iid, corpus_fingerprint=corpus_fp, chunker=chunker_config, chunker_fingerprint=chunker.fingerprint,
        embedder_model=embedder.config.model, embedder_fingerprint=embedder.fingerprint, normalize=embedder.config.normalize,
        n_documents=len(docs), n_chunks=len(chunks), dim=None, has_tenants=any(c.tenant is not None for c in chunks),
        has_scopes=any(c.scopes for c in chunks), build_s=0.0, collection=collection_name(iid, store_config), store=engine,
        store_url=store_config.url, lineage=lineage, embedder_cut=embedder.cut_share([c.indexed_text for c in chunks]),
    )  # fmt: skip
    if lineage is not None and dense:
        report = _update_in_place(root, manifest, chunks, embedder, store_config, resources, progress, t0)
        if report is not None:
            return report
    tmp = root / scratch_name(f".tmp-{iid}")
    tmp.mkdir(parents=True)
    dim, embedded, hits = _write_scratch(tmp, chunks, manifest, embedder, store_config, resources, dense=dense, progress=progress)
    write_manifest(tmp, manifest.model_copy(update={"dim": dim, "build_s": time.perf_counter() - t0}))
    _publish(tmp, root / iid)
    index = open_index(root / iid, store_config, resources, embedder)
    return BuildReport(index, False, embedded, hits, time.perf_counter() - t0)


def _update_in_place(root: Path, manifest: Manifest, chunks: Sequence[Chunk], embedder: Embedder, store_config: StoreConfig,
                     resources: Resources, progress: bool, t0: float) -> BuildReport | None:
    """The previous version of this qdrant-edge index (same lineage) changed into this one, when there is one
    close enough (ragopt/index_update.py) that no other process holds open; None otherwise. Updates of a lineage
    run one at a time, each on the versions it holds exclusively, until the Index it returns holds the new one."""
    serial = lock(root / f".update-{manifest.lineage}{LOCK}", shared=False) if root.is_dir() else None
    try:
        held = _hold_lineage(root, manifest.lineage, store_config, resources)
        try:
            updated = _apply_plan(plan_update(list(held), chunks), root / manifest.id, held, manifest, chunks, embedder,
                                  store_config, progress, t0)
        finally:
            for fd in held.values():
                release(fd)
        if updated is None:
            return None
        index = open_index(root / manifest.id, store_config, resources, embedder)  # before another update may start
    finally:
        release(serial)
    embedded, hits, plan = updated
    return BuildReport(index, False, embedded, hits, time.perf_counter() - t0, updated=(len(plan.removed), len(plan.added)))


def _hold_lineage(root: Path, lineage: str | None, store_config: StoreConfig, resources: Resources) -> dict[Path, int]:
    """This lineage's versions in the workspace that no one else holds open, each locked exclusively (one this process
    holds is let go first: the update replaces it), with a commit a killed run left half done finished."""
    held = {}
    for path in sorted(root.glob("*/manifest.json")) if root.is_dir() else []:
        folder = path.parent
        if folder.name.startswith(".") or json.loads(path.read_text(encoding="utf-8")).get("lineage") != lineage:
            continue
        fd = lock(folder / LOCK, shared=False, wait=False)
        if fd is None:  # held open: by this process, let go; by another, left alone
            resources.drop(("index", os.path.abspath(folder), store_config.url))
            fd = lock(folder / LOCK, shared=False, wait=False)
        if fd is not None:
            finish_commit(folder)  # a run killed while renaming its files
            held[folder] = fd
    return held


def _apply_plan(plan: UpdatePlan | None, final: Path, held: dict[Path, int], manifest: Manifest, chunks: Sequence[Chunk],
                embedder: Embedder, store_config: StoreConfig, progress: bool, t0: float) -> tuple[int, int, UpdatePlan] | None:
    """Steps 1-4 of `plan` (ragopt/index_update.py), its folder renamed to `final`: (texts embedded, cache hits, the
    plan); None without a plan, or when `final` is a version another process holds open."""
    if plan is None or (plan.folder != final and final.exists() and final not in held):
        return None
    store = EdgeStore(plan.folder / "vectors", store_config)
    done = manifest.model_copy(update={"dim": read_manifest(plan.folder).dim, "build_s": time.perf_counter() - t0})
    try:
        embedded, hits = apply_update(plan, chunks, embedder, store, done.model_dump_json(indent=2), progress=progress)
    finally:
        store.close()
    if plan.folder != final:
        shutil.rmtree(final, ignore_errors=True)  # an older state of this lineage under the new id: superseded
        kill_point("rename")
        os.rename(plan.folder, final)
    kill_point("journal")
    clear_journal(final)
    return embedded, hits, plan


def _write_scratch(tmp: Path, chunks: Sequence[Chunk], manifest: Manifest, embedder: Embedder, store_config: StoreConfig,
                   resources: Resources, *, dense: bool, progress: bool) -> tuple[int | None, int, int]:
    """Write the chunks, and the vectors unless `dense` is False, into the scratch folder `tmp`, which is removed
    on any failure. Returns (dim or None, texts embedded, cache hits)."""
    try:
        with open(tmp / "chunks.jsonl", "w", encoding="utf-8") as f:
            f.writelines(c.model_dump_json() + "\n" for c in chunks)
        if not dense:
            return None, 0, 0
        return write_vectors(chunks, embedder, tmp, manifest, store_config, resources, progress)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _publish(tmp: Path, final: Path) -> None:
    """Move the finished scratch folder to its final name."""
    try:
        os.rename(tmp, final)  # the publish step: atomic on one file system
    except OSError:  # another process published the same index first; theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)
