"""Server mode: the same code against a Qdrant API that is not a local folder. qdrant-client's in-process
":memory:" location stands in for a server (none is installable here): collections built under a temporary
name and published by an alias, permission filters inside Qdrant, a rebuild that is a no-op."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from ragopt.backends.qdrant_store import QdrantStore
from ragopt.config import ChunkerConfig, RetrievalConfig, StoreConfig
from ragopt.index import build_index, make_embedder
from ragopt.pipeline import Pipeline
from ragopt.resources import Resources
from ragopt.plan import retrieval_stages
from ragopt.types import Document, Query

DOCS = [
    Document(id="a1", text="The north lab stores fasting glucose in mmol/L.", tenant="north"),
    Document(id="b1", text="The south lab stores fasting glucose in mg/dL.", tenant="south"),
    Document(id="s1", text="Glucose results older than ten years are archived.", tenant=None),
]


SERVER = StoreConfig(url=":memory:")


@pytest.fixture
def resources() -> Iterator[Resources]:
    """Holds the one ":memory:" client that stands in for the server during a test."""
    with Resources() as held:
        yield held


def test_server_build_publishes_an_alias_and_filters_by_tenant(resources: Resources, workspace: Path) -> None:
    server = SERVER
    embedder = make_embedder(workspace, resources=resources)
    report = build_index(DOCS, ChunkerConfig(mode="whole"), embedder, workspace, store_config=server, progress=False)
    assert report.index.manifest.store == "qdrant"
    client = report.index.store.client
    aliases = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
    collection = report.index.manifest.collection
    assert collection == f"ragopt_{report.index.manifest.id}"
    assert aliases[collection].startswith(f"{collection}_build")  # the alias points at the built collection
    assert report.index.store.count() == len(DOCS)

    pipeline = Pipeline(retrieval_stages(report.index, embedder, RetrievalConfig(retriever="dense", top_k=10)))
    hits = pipeline.run(Query(text="fasting glucose unit", tenant="north")).hits
    assert {h.chunk.doc_id for h in hits} == {"a1", "s1"}

    again = build_index(DOCS, ChunkerConfig(mode="whole"), embedder, workspace, store_config=server, progress=False)
    assert again.reused and again.embedded == 0
    assert len(client.get_collections().collections) == 1


def test_publishing_an_existing_alias_drops_the_late_build(resources: Resources) -> None:
    first = QdrantStore("idx_build1", SERVER, resources)
    first.create(3)
    assert first.publish("idx")
    late = QdrantStore("idx_build2", SERVER, resources)
    late.create(3)
    assert not late.publish("idx")
    names = {c.name for c in first.client.get_collections().collections}
    assert names == {"idx_build1"}


def test_an_index_built_locally_is_not_silently_searched_on_a_server(resources: Resources, workspace: Path) -> None:
    from ragopt.errors import InputError

    embedder = make_embedder(workspace, resources=resources)
    build_index(DOCS, ChunkerConfig(mode="whole"), embedder, workspace, progress=False)
    with pytest.raises(InputError, match="in this workspace, not in the Qdrant server :memory:"):
        build_index(DOCS, ChunkerConfig(mode="whole"), embedder, workspace, store_config=SERVER, progress=False)
