"""Indexes: a rebuild is a no-op, an interrupted build (an exception, or SIGKILL of the building process)
publishes nothing and its re-run gives the same index as an uninterrupted build, stale scratch folders of
dead builds are removed, each workspace holds its own index, and an index of another format is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragopt.backends.exact_store import ExactStore
from ragopt.config import ChunkerConfig, EmbedderConfig
from ragopt.data.beir import load_beir
from ragopt.errors import InputError
from ragopt.index import build_index, make_embedder, open_index
from ragopt.workspace import LOCK, remove_stale_scratch, scratch_name
from ragopt.types import Document

REPO = Path(__file__).resolve().parents[1]


def published(workspace: Path) -> list[Path]:
    root = workspace / "indexes"
    return sorted(p for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else []


def test_building_the_same_index_twice_is_a_no_op(tiny_beir: Path, workspace: Path) -> None:
    docs = load_beir(tiny_beir).documents
    cfg = ChunkerConfig(mode="tokens", size=16, overlap=4)
    embedder = make_embedder(workspace)
    cold = build_index(docs, cfg, embedder, workspace, progress=False)
    assert not cold.reused and cold.embedded == cold.index.manifest.n_chunks > len(docs)
    assert cold.index.store.count() == cold.index.manifest.n_chunks

    fresh = make_embedder(workspace)  # as a new process would
    warm = build_index(docs, cfg, fresh, workspace, progress=False)
    assert warm.reused and warm.embedded == 0 and warm.index.path == cold.index.path
    assert published(workspace) == [cold.index.path]
    assert "model" not in vars(fresh)  # no work: the model was never even loaded (speed: benchmarks/bench_startup.py)

    other = build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False)
    assert not other.reused and other.index.path != cold.index.path and len(published(workspace)) == 2
    changed = [Document(id=d.id, text=d.text + (" Edited." if d.id == "d1" else ""), title=d.title) for d in docs]
    rebuilt = build_index(changed, ChunkerConfig(mode="whole"), embedder, workspace, progress=False)
    assert not rebuilt.reused and rebuilt.embedded == 1 and rebuilt.cache_hits == len(docs) - 1  # one new text


def test_each_workspace_gets_its_own_index(tiny_beir: Path, tmp_path: Path) -> None:
    """The same corpus built in a second workspace must live there, not be served from the first one."""
    docs = load_beir(tiny_beir).documents
    ws1, ws2 = tmp_path / "ws1", tmp_path / "ws2"
    embedder1 = make_embedder(ws1)
    first = build_index(docs, ChunkerConfig(mode="whole"), embedder1, ws1, progress=False)
    second = build_index(docs, ChunkerConfig(mode="whole"), make_embedder(ws2, resources=embedder1.resources), ws2, progress=False)
    assert second.index is not first.index
    assert second.index.path == ws2 / "indexes" / first.index.manifest.id
    assert (ws2 / "indexes" / first.index.manifest.id / "manifest.json").exists()
    assert not second.reused and second.embedded == len(docs)  # ws2 has its own, empty cache


def test_an_interrupted_build_publishes_nothing_and_the_rerun_reuses_embeddings(
    tiny_beir: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = load_beir(tiny_beir).documents
    cfg = ChunkerConfig(mode="tokens", size=12, overlap=0)

    def disk_full(self: ExactStore, chunks: Any, vectors: Any, first_index: int = 0) -> None:
        raise OSError("disk full")  # a fault on purpose: the vectors cannot be written

    with monkeypatch.context() as patch:
        patch.setattr(ExactStore, "upsert", disk_full)
        with pytest.raises(OSError, match="disk full"):
            build_index(docs, cfg, make_embedder(workspace), workspace, progress=False)
    assert list((workspace / "indexes").iterdir()) == []  # no half index, and no scratch folder left behind

    rerun = build_index(docs, cfg, make_embedder(workspace), workspace, progress=False)
    n = rerun.index.manifest.n_chunks
    assert not rerun.reused and rerun.embedded == 0 and rerun.cache_hits == n  # embeddings survived the crash
    assert rerun.index.store.count() == n and len(rerun.index.chunks) == n
    assert published(workspace) == [rerun.index.path]
    found = rerun.index.store.search(make_embedder(workspace).encode(["Who lays the eggs in a bee hive?"]).vectors[0], 1, None)
    assert rerun.index.chunks[found[0][0]].doc_id == "d3"


# Builds an index with a small block so that the cache is written several times, and stalls for good after
# the first write of vectors (a fault on purpose) once it has told the test so through the marker file.
KILLED_BUILD = """
import os, sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
from ragopt.cache import DiskStore
from ragopt.config import ChunkerConfig, EmbedderConfig
from ragopt.data.beir import load_beir
from ragopt.index import build_index, make_embedder

beir, ws, marker = map(Path, sys.argv[1:4])
real_set_many = DiskStore.set_many

def set_many_then_stall(self, items, ttl_s):
    real_set_many(self, items, ttl_s)
    if not items[0][0].startswith("embedding:"):  # e.g. the model's fingerprint, stored before the build
        return
    marker.write_text(str(os.getpid()))
    time.sleep(600)

DiskStore.set_many = set_many_then_stall
embedder = make_embedder(ws, EmbedderConfig(batch_size=4))
embedder.save_every = 8
build_index(load_beir(beir).documents, ChunkerConfig(mode="tokens", size=12, overlap=0), embedder, ws, progress=False)
"""


def index_files(path: Path) -> dict[str, Any]:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.pop("build_s")
    vectors = path / "vectors"
    return {
        "manifest": manifest,
        "chunks": (path / "chunks.jsonl").read_bytes(),
        "positions": np.load(vectors / "positions.npy").tolist(),
        "owners": json.loads((vectors / "owners.json").read_text()),
        "vectors": np.load(vectors / "vectors.npy"),
        "files": sorted(p.name for p in path.rglob("*")),
    }


@pytest.mark.slow  # a second Python process that imports torch: 10-30 s on 2 busy cores
def test_a_build_killed_mid_way_leaves_nothing_and_the_rerun_builds_the_same_index(tiny_beir: Path, tmp_path: Path) -> None:
    docs = load_beir(tiny_beir).documents
    cfg = ChunkerConfig(mode="tokens", size=12, overlap=0)
    ws, marker = tmp_path / "ws", tmp_path / "first-block-saved"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(tiny_beir), str(ws), str(marker)], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None, f"the build exited before it was killed: {proc.stderr.read().decode()[-2000:]}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the build never saved its first block"
            time.sleep(0.05)
    finally:
        proc.kill()  # SIGKILL: no handler, no cleanup of its own
        proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]
    assert proc.returncode == -signal.SIGKILL
    left = list((ws / "indexes").iterdir())
    assert len(left) == 1 and left[0].name.startswith(".tmp-")  # killed mid-build: only its scratch folder

    embedder = make_embedder(ws, EmbedderConfig(batch_size=4))
    rerun = build_index(docs, cfg, embedder, ws, progress=False)
    n = rerun.index.manifest.n_chunks
    assert n > 8 and (rerun.embedded, rerun.cache_hits) == (n - 8, 8)  # the killed run's first block was kept
    assert [p.name for p in (ws / "indexes").iterdir()] == [rerun.index.manifest.id]  # the stale scratch is gone

    reference = build_index(docs, cfg, make_embedder(tmp_path / "ref", EmbedderConfig(batch_size=4)), tmp_path / "ref", progress=False)
    got, want = index_files(rerun.index.path), index_files(reference.index.path)
    assert np.allclose(got.pop("vectors"), want.pop("vectors"), atol=1e-6)
    assert got == want


def test_stale_scratch_of_dead_processes_is_removed_and_live_or_foreign_is_kept(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead_pid = int(done.stdout)  # a process that has exited (pids are not reused this quickly)
    mine = scratch_name(".tmp-abc")
    host = mine.split("@")[1]
    names = [f".tmp-abc@{host}@{dead_pid}", mine, f".tmp-abc@{host}@{os.getppid()}", f".tmp-abc@another-host@{dead_pid}", "abc"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "chunks.jsonl").write_text("x")
    removed = remove_stale_scratch(tmp_path, ".tmp-")
    assert [p.name for p in removed] == [names[0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])


def test_reopening_a_published_index_and_idempotent_upserts(tiny_beir: Path, workspace: Path) -> None:
    docs = load_beir(tiny_beir).documents
    embedder = make_embedder(workspace)
    report = build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False)
    index = report.index
    assert build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False).index is index  # one per Resources
    again = open_index(index.path)
    assert again is not index and again.manifest == index.manifest and [c.id for c in again.chunks] == [c.id for c in index.chunks]
    n = index.store.count()
    vectors = embedder.encode([c.indexed_text for c in index.chunks[:3]]).vectors
    index.store.upsert(index.chunks[:3], vectors)  # the same chunks again: nothing added
    assert index.store.count() == n == len(docs)
    m = index.manifest
    assert (m.n_documents, m.n_chunks, m.dim, m.has_tenants, m.has_scopes, m.store) == (len(docs), len(docs), 384, False, False, "numpy-exact")


def test_an_index_of_the_previous_format_is_refused_not_misread(tiny_beir: Path, workspace: Path) -> None:
    docs = load_beir(tiny_beir).documents
    report = build_index(docs, ChunkerConfig(mode="whole"), make_embedder(workspace), workspace, progress=False)
    old = workspace / "old"
    old.mkdir()
    manifest = json.loads((report.index.path / "manifest.json").read_text())
    del manifest["store"]  # format 1 kept its vectors in qdrant-client local mode and did not say so
    (old / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="another ragopt version"):
        open_index(old)


def test_an_empty_corpus_is_an_input_error(workspace: Path) -> None:
    with pytest.raises(InputError, match="empty"):
        build_index([], ChunkerConfig(), make_embedder(workspace), workspace, progress=False)


def test_a_bm25_only_index_embeds_nothing_until_a_dense_search_needs_vectors(tiny_beir: Path, workspace: Path) -> None:
    from ragopt.config import RetrievalConfig
    from ragopt.pipeline import Pipeline
    from ragopt.plan import retrieval_stages

    docs = load_beir(tiny_beir).documents
    embedder = make_embedder(workspace)
    lexical = build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False, dense=False)
    index = lexical.index
    assert lexical.embedded == 0 and index.manifest.dim is None and not (index.path / "vectors").exists()
    hits = Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever="bm25", top_k=3))).run("bee hive eggs").hits
    assert hits[0].chunk.doc_id == "d3"
    assert "model" not in embedder.__dict__  # the embedding model was never loaded

    dense = build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False, dense=True)
    assert dense.index is index and not dense.reused and dense.embedded == len(docs)
    assert open_index(index.path).manifest.dim == 384 and index.store.count() == len(docs)
    hits = Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever="dense", top_k=3))).run("bee hive eggs").hits
    assert hits[0].chunk.doc_id == "d3"
    again = build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False, dense=True)
    assert again.reused and again.embedded == 0
    leftovers = sorted(p.name for p in index.path.iterdir() if p.name.startswith(".") and p.name != LOCK)  # .lock: open
    assert published(workspace) == [index.path] and leftovers == []
