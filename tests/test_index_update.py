"""Updates in place of a qdrant-edge index (ragopt/index_update.py): a changed corpus re-embeds only its changed
chunks, deletes the removed ones, moves the index id (the knowledge-base version in cache keys), and a search then
sees the new text, never the old; an update killed half way leaves a shard that opens, and the re-run completes
it; an unrelated corpus gets an index of its own; a shard written by another embedder is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragopt.backends.edge_store import EdgeStore
from ragopt.config import ChunkerConfig, StoreConfig
from ragopt.errors import InputError
from ragopt.index import build_index, make_embedder
from ragopt.types import Document, Query
from fixtures.tiny_corpus import TINY_DOCS

EDGE = StoreConfig(engine="qdrant-edge")
WHOLE = ChunkerConfig(mode="whole")
NEW_BEES = "Honey bees: the drones mate with the queen during a nuptial flight far from the hive."
QUESTION = "Which bees mate with the queen on a nuptial flight?"


def version_one() -> list[Document]:
    return [Document(id=d["_id"], title=d["title"], text=d["text"], tenant=None if i % 3 == 0 else "north")
            for i, d in enumerate(TINY_DOCS)]


def version_two() -> list[Document]:
    """d3's text changed, d12 removed, d13 added."""
    docs = [d.model_copy(update={"text": NEW_BEES}) if d.id == "d3" else d for d in version_one() if d.id != "d12"]
    return [*docs, Document(id="d13", title="Deserts", text="A desert receives less than 250 mm of rain a year.", tenant="north")]


def published(workspace: Path) -> list[Path]:
    return sorted(p for p in (workspace / "indexes").iterdir() if not p.name.startswith("."))


def ask(report, embedder, text: str, k: int = 12):  # type: ignore[no-untyped-def]
    vector = embedder.encode([text], role="query").vectors[0]
    return report.index.hits(report.index.store.search(vector, k, Query(text=text, tenant="north")), "vector")


def test_a_changed_corpus_updates_the_shard_in_place(workspace: Path) -> None:
    embedder = make_embedder(workspace)
    first = build_index(version_one(), WHOLE, embedder, workspace, store_config=EDGE, progress=False)
    assert first.index.manifest.store == "qdrant-edge" and first.index.open_store() is not None
    old_id = first.index.manifest.id

    second = build_index(version_two(), WHOLE, embedder, workspace, store_config=EDGE, progress=False)
    assert second.updated == (2, 2)  # old d3 and d12 out; new d3 and d13 in
    assert second.embedded == 2  # only the changed and the added chunk were embedded
    assert second.index.manifest.id != old_id  # the knowledge-base version moves
    assert published(workspace) == [second.index.path] and second.index.store.count() == 12
    hits = ask(second, embedder, QUESTION)
    assert hits[0].chunk.doc_id == "d3" and hits[0].chunk.text == NEW_BEES
    assert not any("The queen lays the eggs" in h.chunk.text for h in hits)  # the old text is gone
    assert {h.chunk.doc_id for h in hits} == {d.id for d in version_two()}  # every point maps to the new list

    fresh_ws = workspace.parent / "fresh"
    fresh = build_index(version_two(), WHOLE, make_embedder(fresh_ws), fresh_ws, store_config=EDGE, progress=False)
    assert fresh.index.manifest.id == second.index.manifest.id  # the update is the index a fresh build makes
    assert [h.chunk.id for h in ask(fresh, embedder, QUESTION)] == [h.chunk.id for h in hits]

    again = build_index(version_two(), WHOLE, make_embedder(workspace), workspace, store_config=EDGE, progress=False)
    assert again.reused and again.updated is None


def test_a_killed_update_leaves_a_shard_that_opens_and_the_rerun_completes_it(workspace: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = make_embedder(workspace)
    build_index(version_one(), WHOLE, embedder, workspace, store_config=EDGE, progress=False)

    def killed(self: EdgeStore, *args: object) -> None:
        raise OSError("killed")  # a fault on purpose: after the deletes, before the new points

    with monkeypatch.context() as patch:
        patch.setattr(EdgeStore, "put_points", killed)
        with pytest.raises(OSError, match="killed"):
            build_index(version_two(), WHOLE, embedder, workspace, store_config=EDGE, progress=False)
    [half] = published(workspace)
    assert json.loads((half / "update.json").read_text())["state"] == "apply"
    shard = EdgeStore(half / "vectors", EDGE)
    assert shard.open() >= 0 and shard.count() == 10  # it opens: two points deleted, none added yet
    shard.close()

    done = build_index(version_two(), WHOLE, make_embedder(workspace), workspace, store_config=EDGE, progress=False)
    assert done.updated is not None and published(workspace) == [done.index.path]
    assert not (done.index.path / "update.json").exists() and done.index.store.count() == 12
    assert ask(done, embedder, QUESTION)[0].chunk.text == NEW_BEES


def test_an_unrelated_corpus_gets_its_own_index(workspace: Path) -> None:
    embedder = make_embedder(workspace)
    first = build_index(version_one(), WHOLE, embedder, workspace, store_config=EDGE, progress=False)
    other = [Document(id=f"x{i}", text=f"Ward {i} keeps its own rota of {i + 3} nurses.") for i in range(6)]
    second = build_index(other, WHOLE, embedder, workspace, store_config=EDGE, progress=False)
    assert second.updated is None and len(published(workspace)) == 2 and first.index.path.exists()


def test_a_shard_of_another_embedder_is_refused(workspace: Path) -> None:
    embedder = make_embedder(workspace)
    path = build_index(version_one(), WHOLE, embedder, workspace, store_config=EDGE, progress=False).index.path
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "embedder_fingerprint": "0" * 16, "dim": 768}))
    with pytest.raises(InputError, match=r"written by the embedder .*\(768 dimensions") as err:
        build_index(version_one(), WHOLE, make_embedder(workspace), workspace, store_config=EDGE, progress=False)
    assert "manifest.json" in str(err.value)
