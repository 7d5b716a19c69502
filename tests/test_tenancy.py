"""Tenant and permission isolation, end to end over a real index (MiniLM + Qdrant local + BM25).

No chunk of one tenant ever comes back to another tenant's query, in vector, keyword or hybrid retrieval,
even when the query is the other tenant's document word for word and k is larger than the index. Scopes
narrow what a tenant sees; shared data is seen by all; a query without a tenant is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragopt.config import ChunkerConfig, FusionConfig, RetrievalConfig
from ragopt.errors import TenantRequired
from ragopt.index import build_index, make_embedder
from ragopt.pipeline import Pipeline
from ragopt.plan import retrieval_stages
from ragopt.types import Document, Query, visible_to

TEXTS = {
    "payroll": "Payroll runs on the 25th. Overtime is approved by the shift lead before it is paid.",
    "lab": "Creatinine is reported in micromoles per litre. Values above 2000 are flagged for review.",
    "backup": "Nightly backups start at 02:00 and are kept for 35 days. Restores need a ticket.",
    "glossary": "eGFR is an estimate of kidney filtration. It is derived from creatinine, age and sex.",
}


def corpus() -> list[Document]:
    docs = []
    for tenant in ("north", "south"):
        for name, text in TEXTS.items():  # both tenants hold documents with identical text
            docs.append(Document(id=f"{tenant}-{name}", text=f"{text} Owner {tenant}.", title=name, tenant=tenant))
        docs.append(Document(id=f"{tenant}-hr", text=f"Salary bands of {tenant} staff are confidential. Band 7 starts at 52,000.", tenant=tenant, scopes=["hr"]))
        docs.append(Document(id=f"{tenant}-fin", text=f"The {tenant} budget for 2025 is 4.2 million. Capital spend is frozen.", tenant=tenant, scopes=["finance"]))
        docs.append(Document(id=f"{tenant}-both", text=f"Bonus accruals of {tenant} are reviewed by HR and finance together.", tenant=tenant, scopes=["hr", "finance"]))
    docs.append(Document(id="shared-policy", text="All staff must complete data protection training every year.", title="policy"))
    docs.append(Document(id="shared-ops", text="The on-call rota for operations is published every Friday.", scopes=["ops"]))
    return docs


RETRIEVERS = {
    "dense": RetrievalConfig(retriever="dense"),
    "bm25": RetrievalConfig(retriever="bm25"),
    "hybrid-rrf": RetrievalConfig(retriever="hybrid", fusion=FusionConfig(method="rrf", depth=200)),
    "hybrid-convex": RetrievalConfig(retriever="hybrid", fusion=FusionConfig(method="convex", alpha=0.5, norm="zscore", depth=200)),
}
ASKERS = [
    ("north", ()), ("north", ("hr",)), ("north", ("finance", "hr")), ("north", ("ops",)),
    ("south", ()), ("south", ("hr",)), ("south", ("finance",)),
    ("east", ()), ("east", ("hr", "finance", "ops")),  # a tenant with no data of its own
]  # fmt: skip


@pytest.fixture(scope="module")
def tenant_index(tmp_path_factory: pytest.TempPathFactory) -> Any:
    ws = tmp_path_factory.mktemp("tenancy")
    embedder = make_embedder(ws)
    report = build_index(corpus(), ChunkerConfig(mode="tokens", size=16, overlap=4), embedder, ws, progress=False)
    yield report.index, embedder
    report.index.store.close()


def test_the_index_is_chunked_and_marked_as_holding_tenant_data(tenant_index: Any) -> None:
    index, _ = tenant_index
    assert index.manifest.has_tenants and index.manifest.has_scopes
    assert index.manifest.n_chunks > len(corpus())  # several chunks per document


@pytest.mark.parametrize("retriever", list(RETRIEVERS))
def test_no_chunk_crosses_a_tenant_or_scope(tenant_index: Any, retriever: str) -> None:
    index, embedder = tenant_index
    n = index.manifest.n_chunks
    pipeline = Pipeline(retrieval_stages(index, embedder, RETRIEVERS[retriever], k=n))  # k: the whole index
    # every document's exact text, every chunk's exact text, and a few generic questions
    queries = [d.text for d in corpus()] + [c.text for c in index.chunks] + ["salary band budget bonus", "backup restore ticket", "staff"]
    asked = [Query(text=text, tenant=tenant, scopes=scopes) for tenant, scopes in ASKERS for text in queries]
    embedder.encode([q.text for q in asked], [(q.tenant, q.scopes) for q in asked])  # batched: warms the cache
    returned = 0
    for q in asked:
        hits = pipeline.run(q).hits
        leaked = [h.chunk.doc_id for h in hits if not visible_to(h.chunk.tenant, h.chunk.scopes, q)]
        assert not leaked, f"{retriever}: {q.tenant}/{q.scopes} got {leaked} for {q.text!r}"
        returned += len(hits)
    assert returned > 100  # the queries do return data, so the check above is not vacuous


def test_dense_at_full_depth_returns_exactly_what_the_asker_may_see(tenant_index: Any) -> None:
    """Vector search at k >= index size returns every permitted chunk: no leak, and no over-filtering."""
    index, embedder = tenant_index
    pipeline = Pipeline(retrieval_stages(index, embedder, RETRIEVERS["dense"], k=index.manifest.n_chunks))
    for tenant, scopes in ASKERS:
        q = Query(text=TEXTS["payroll"], tenant=tenant, scopes=scopes)
        got = {h.chunk.id for h in pipeline.run(q).hits}
        allowed = {c.id for c in index.chunks if visible_to(c.tenant, c.scopes, q)}
        assert got == allowed, (tenant, scopes)


def test_scopes_narrow_what_a_tenant_sees(tenant_index: Any) -> None:
    index, embedder = tenant_index
    pipeline = Pipeline(retrieval_stages(index, embedder, RETRIEVERS["bm25"], k=index.manifest.n_chunks))

    def docs(tenant: str, scopes: tuple[str, ...], text: str) -> set[str]:
        return {h.chunk.doc_id for h in pipeline.run(Query(text=text, tenant=tenant, scopes=scopes)).hits}

    salary = "salary bands band staff confidential budget capital bonus accruals"
    assert docs("north", (), salary) == {"shared-policy"}  # unscoped asker: no scoped document
    assert docs("north", ("hr",), salary) == {"north-hr", "north-both", "shared-policy"}
    assert docs("north", ("finance",), salary) == {"north-fin", "north-both", "shared-policy"}
    assert docs("north", ("ops",), "on-call rota operations") == {"shared-ops"}
    assert docs("south", (), "on-call rota operations") == set()
    # the owner finds its own document first with its exact text
    top = pipeline.run(Query(text=corpus()[0].text, tenant="north")).hits[0]
    assert top.chunk.doc_id == "north-payroll"


@pytest.mark.parametrize("retriever", list(RETRIEVERS))
def test_a_query_without_a_tenant_is_refused(tenant_index: Any, retriever: str) -> None:
    index, embedder = tenant_index
    pipeline = Pipeline(retrieval_stages(index, embedder, RETRIEVERS[retriever], k=5))
    with pytest.raises(TenantRequired) as err:
        pipeline.run(Query(text=TEXTS["lab"], scopes=["hr"]))
    assert err.value.field == "tenant"


def test_an_index_without_tenants_needs_no_tenant(workspace: Path) -> None:
    docs = [Document(id="a", text="Open data for everyone."), Document(id="b", text="More open data.", scopes=["ops"])]
    report = build_index(docs, ChunkerConfig(mode="whole"), make_embedder(workspace), workspace, progress=False)
    pipeline = Pipeline(retrieval_stages(report.index, make_embedder(workspace), RetrievalConfig(retriever="hybrid"), k=5))
    assert {h.chunk.doc_id for h in pipeline.run(Query(text="open data")).hits} == {"a"}
    assert {h.chunk.doc_id for h in pipeline.run(Query(text="open data", scopes=["ops"])).hits} == {"a", "b"}


def test_an_empty_string_tenant_is_a_tenant_not_shared_data(workspace: Path) -> None:
    """A tenant id of "" (an empty CSV cell, say) must not turn into shared data in one retriever only."""
    docs = [
        Document(id="empty", text="The secret roadmap of the unnamed tenant.", tenant=""),
        Document(id="b", text="Bravo's own notes.", tenant="b"),
        Document(id="shared", text="Shared handbook.", tenant=None),
    ]
    report = build_index(docs, ChunkerConfig(mode="whole"), make_embedder(workspace), workspace, progress=False)
    for name, cfg in RETRIEVERS.items():
        pipeline = Pipeline(retrieval_stages(report.index, make_embedder(workspace), cfg, k=10))
        got = {h.chunk.doc_id for h in pipeline.run(Query(text=docs[0].text, tenant="b")).hits}
        assert "empty" not in got, name
        own = {h.chunk.doc_id for h in pipeline.run(Query(text=docs[0].text, tenant="")).hits}
        assert "empty" in own and "b" not in own, name
