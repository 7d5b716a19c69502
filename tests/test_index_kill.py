"""Updates in place of a qdrant-edge index (ragopt/index_update.py) under a real kill: `ragopt index` runs as a
subprocess that sends itself SIGKILL at a named step of the update (RAGOPT_TEST_KILL_AT, ragopt.workspace.kill_point),
so no `finally`, flush or atexit runs. At each step, twice in a row with the corpus changed between, and once more
with a kill after the new points were written followed by one right after the journal (two journals that must add
up, not overwrite). Then the index opens, a re-run completes it, and it is the index a fresh build makes: the same
points, the same hits. And a version another process holds open is never changed under it: the update builds a
new index beside it instead."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from fixtures.cli import ragopt
from fixtures.tiny_corpus import TINY_DOCS

from ragopt.config import ChunkerConfig, StoreConfig
from ragopt.index import make_embedder, open_index
from ragopt.index_update import JOURNAL
from ragopt.workspace import KILL_AT

STEPS = ["apply", "points", "writing", "commit", "rename", "journal"]
EDGE = ["--vector-store", "qdrant-edge"]
QUESTIONS = ["Which bees mate with the queen?", "How much rain does a desert get?", "What do volcanoes release?"]


def corpus(version: int) -> dict[str, str]:
    """File name -> text: the tiny corpus and 8 ward notes (an update changes at most half of it). 2: d3 changed,
    d12 removed, d13 added. 3: d5 changed too, d13 removed, d14 added."""
    docs = {f"{d['_id']}.txt": f"{d['title']}\n\n{d['text']}" for d in TINY_DOCS}
    docs |= {f"ward{i}.txt": f"Ward {i}\n\nWard {i} keeps its own rota of {i + 3} nurses on the night shift." for i in range(8)}
    if version >= 2:
        docs["d3.txt"] = "Honey bees\n\nThe drones mate with the queen during a nuptial flight far from the hive."
        docs.pop("d12.txt")
        docs["d13.txt"] = "Deserts\n\nA desert receives less than 250 mm of rain a year."
    if version >= 3:
        docs["d5.txt"] += " It was revised in the third version of the corpus."
        docs.pop("d13.txt")
        docs["d14.txt"] = "Glaciers\n\nA glacier is a persistent body of dense ice that moves under its own weight."
    return docs


def write_corpus(folder: Path, version: int) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, text in corpus(version).items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def index(workspace: Path, docs: Path, kill_at: str | None = None) -> int:
    done = ragopt("index", "--docs", str(docs), *EDGE, workspace=workspace, env={KILL_AT: kill_at or ""})
    assert done.returncode == (-signal.SIGKILL if kill_at else 0), done.stderr
    return done.returncode


def published(workspace: Path) -> list[Path]:
    return sorted(p for p in (workspace / "indexes").iterdir() if p.is_dir() and not p.name.startswith("."))


def edge_indexes(workspace: Path) -> list[Path]:
    return [p for p in published(workspace) if (p / "vectors" / "shard").exists()]


def figures(path: Path, vectors: list) -> tuple[str, int, list[list[str]]]:  # type: ignore[type-arg]
    """What a search sees: the index id, its points, and each question's hits over all of them (chunk ids, best first)."""
    idx = open_index(path, StoreConfig(engine="qdrant-edge"))
    try:
        hits = [[h.chunk.id for h in idx.hits(idx.store.search(v, 50, None), "vector")] for v in vectors]
        return idx.manifest.id, idx.store.count(), hits
    finally:
        idx.close()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A workspace holding the qdrant-edge index of version 1, its cache warm with the embeddings of versions 2 and 3
    (their exact-store indexes, another lineage), so the killed runs embed nothing; and a fresh build of version 3."""
    root = tmp_path_factory.mktemp("kill")
    docs = {v: write_corpus(root / f"docs-v{v}", v) for v in (1, 2, 3)}
    ws = root / "base"
    index(ws, docs[1])
    for v in (2, 3):
        assert ragopt("index", "--docs", str(docs[v]), "--vector-store", "exact", workspace=ws).returncode == 0
    fresh = root / "fresh"
    index(fresh, docs[3])
    [edge] = published(fresh)
    embedder = make_embedder(root / "questions")
    vectors = list(embedder.encode(QUESTIONS, role="query").vectors)
    return {"root": root, "ws": ws, "fresh": edge, "vectors": vectors, "figures": figures(edge, vectors),
            **{f"v{v}": docs[v] for v in docs}}


@pytest.mark.parametrize("first,second", [(s, s) for s in STEPS] + [("writing", "apply")])
def test_an_update_killed_twice_with_the_corpus_changed_between_completes_as_a_fresh_build(
        base: dict[str, Path], first: str, second: str) -> None:
    ws = base["root"] / f"ws-{first}-{second}"
    shutil.copytree(base["ws"], ws)
    index(ws, base["v2"], kill_at=first)
    index(ws, base["v3"], kill_at=second)
    for path in edge_indexes(ws):  # every version left there opens
        opened = open_index(path, StoreConfig(engine="qdrant-edge"))
        assert opened.open_store() is not None and opened.store.count() > 0
        opened.close()
    index(ws, base["v3"])  # the re-run completes it
    [edge] = edge_indexes(ws)
    assert edge.name == base["fresh"].name  # the update became the fresh build's index, nothing left beside it
    assert not (edge / JOURNAL).exists()
    assert figures(edge, base["vectors"]) == base["figures"]  # the same points (no orphan), the same hits


def test_an_update_never_changes_a_version_another_process_holds_open(base: dict[str, Path]) -> None:
    ws = base["root"] / "ws-held"
    shutil.copytree(base["ws"], ws)
    [v1] = edge_indexes(ws)
    before = figures(v1, base["vectors"])
    held = open_index(v1, StoreConfig(engine="qdrant-edge"))  # as serve holds the version it serves
    try:
        index(ws, base["v3"])
        assert figures(v1, base["vectors"]) == before  # untouched under its reader, still under its name
        assert sorted(p.name for p in edge_indexes(ws)) == sorted([v1.name, base["fresh"].name])  # built beside it
    finally:
        held.close()
    shutil.rmtree(ws / "indexes" / base["fresh"].name)
    index(ws, base["v3"])  # let go: the next run updates that version in place
    [edge] = edge_indexes(ws)
    assert edge.name == base["fresh"].name and figures(edge, base["vectors"]) == base["figures"]
