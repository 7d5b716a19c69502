"""Core types: normalized scopes, stable chunk ids, the one permission rule, LangChain documents in."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document as LCDocument
from pydantic import ValidationError

from ragopt.types import Chunk, Document, Hit, Query, Turn, visible_to


def test_scopes_are_a_sorted_deduplicated_tuple_whatever_comes_in() -> None:
    assert Document(id="d", text="t", scopes=["b", "a", "b"]).scopes == ("a", "b")
    assert Document(id="d", text="t", scopes="ops").scopes == ("ops",)
    assert Document(id="d", text="t", scopes=None).scopes == ()
    assert Query(text="q", scopes={"z", "y"}).scopes == ("y", "z")


def test_documents_and_chunks_are_frozen() -> None:
    doc = Document(id="d", text="t")
    with pytest.raises(ValidationError):
        doc.text = "changed"  # type: ignore[misc]
    chunk = Chunk(id="c", doc_id="d", start=0, end=1, text="t")
    with pytest.raises(ValidationError):
        chunk.start = 3  # type: ignore[misc]


def test_chunk_id_is_stable_and_depends_on_every_part() -> None:
    base = Chunk.make_id("doc-1", 0, 120, "fp")
    assert base == Chunk.make_id("doc-1", 0, 120, "fp")
    assert len(base) == 24 and int(base, 16) >= 0
    others = {
        Chunk.make_id("doc-2", 0, 120, "fp"),
        Chunk.make_id("doc-1", 1, 120, "fp"),
        Chunk.make_id("doc-1", 0, 121, "fp"),
        Chunk.make_id("doc-1", 0, 120, "fp2"),
    }
    assert base not in others and len(others) == 4
    # the separator keeps ("a1", 0) and ("a", 10) apart
    assert Chunk.make_id("a1", 0, 5, "f") != Chunk.make_id("a", 10, 5, "f")


def test_indexed_text_carries_the_title() -> None:
    assert Chunk(id="c", doc_id="d", start=0, end=4, text="body", title="Head").indexed_text == "Head body"
    assert Chunk(id="c", doc_id="d", start=0, end=4, text="body").indexed_text == "body"


@pytest.mark.parametrize(
    ("tenant", "scopes", "q_tenant", "q_scopes", "visible"),
    [
        (None, (), None, (), True),  # shared, unscoped: everyone
        (None, (), "a", ("x",), True),
        ("a", (), "a", (), True),
        ("a", (), "b", (), False),  # another tenant's data: never
        ("a", (), None, (), False),  # a query without tenant does not see tenant data
        (None, ("hr",), "a", ("hr", "ops"), True),
        (None, ("hr",), "a", ("ops",), False),
        (None, ("hr",), "a", (), False),
        ("a", ("hr", "fin"), "a", ("fin",), True),
        ("a", ("hr",), "b", ("hr",), False),
    ],
)
def test_visible_to(tenant, scopes, q_tenant, q_scopes, visible) -> None:  # type: ignore[no-untyped-def]
    assert visible_to(tenant, scopes, Query(text="q", tenant=q_tenant, scopes=q_scopes)) is visible


def test_from_langchain_moves_id_title_tenant_scopes_out_of_metadata() -> None:
    lc = LCDocument(page_content="Body text.", metadata={"id": "x1", "title": "T", "tenant": "acme", "scopes": ["b", "a"], "k": 1})
    doc = Document.from_langchain(lc)
    assert (doc.id, doc.text, doc.title, doc.tenant, doc.scopes) == ("x1", "Body text.", "T", "acme", ("a", "b"))
    assert doc.metadata == {"k": 1}
    assert lc.metadata["id"] == "x1"  # the caller's document is left alone

    with_id = Document.from_langchain(LCDocument(page_content="p", id="native", metadata={"id": "meta"}))
    assert with_id.id == "native"

    anon1 = Document.from_langchain(LCDocument(page_content="same text"))
    anon2 = Document.from_langchain(LCDocument(page_content="same text"))
    assert anon1.id == anon2.id and anon1.tenant is None and anon1.scopes == ()
    assert Document.from_langchain(LCDocument(page_content="other text")).id != anon1.id


def test_query_history_and_hit() -> None:
    q = Query(text="and then?", history=[{"role": "user", "content": "hi"}])  # type: ignore[list-item]
    assert q.history == [Turn(role="user", content="hi")]
    with pytest.raises(ValidationError):
        Query(text="q", history=[{"role": "robot", "content": "x"}])  # type: ignore[list-item]
    hit = Hit(chunk=Chunk(id="c", doc_id="d", start=0, end=1, text="t"), score=0.5, rank=1, retriever="bm25")
    assert Hit.model_validate_json(hit.model_dump_json()) == hit


def test_the_shared_marker_is_neither_a_tenant_nor_a_scope() -> None:
    import pydantic

    from ragopt.types import EVERYONE, Document, Query

    for bad in ({"tenant": EVERYONE}, {"scopes": ["ops", EVERYONE]}):
        with pytest.raises(pydantic.ValidationError, match="reserved"):
            Document(id="d", text="t", **bad)
        with pytest.raises(pydantic.ValidationError, match="reserved"):
            Query(text="q", **bad)
