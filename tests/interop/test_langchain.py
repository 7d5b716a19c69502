"""LangChain interop with real retrieval: RagoptRetriever returns Documents with ragopt's metadata and obeys
its tenant; as_runnable invokes and batches str / Query / dict inputs, returning hits or an answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda

from ragopt.config import ChunkerConfig, RetrievalConfig
from ragopt.errors import InputError, TenantRequired
from ragopt.index import build_index, make_embedder
from ragopt.interop.langchain import RagoptRetriever, as_runnable, hit_to_document
from ragopt.pipeline import Pipeline
from ragopt.plan import retrieval_stages
from ragopt.stages.generate_extractive import ExtractiveGenerator
from ragopt.types import Document, Query

META_KEYS = {"doc_id", "chunk_id", "start", "end", "score", "rank", "retriever", "tenant"}


def test_retriever_returns_documents_with_ragopt_metadata(tiny_index: Any) -> None:
    index, embedder = tiny_index
    retriever = RagoptRetriever(pipeline=retrieval_stages(index, embedder, RetrievalConfig(retriever="hybrid"), k=5))
    assert isinstance(retriever, BaseRetriever) and isinstance(retriever.pipeline, Pipeline)
    docs = retriever.invoke("What causes ocean tides?")
    assert len(docs) == 5 and all(isinstance(d, LCDocument) for d in docs)
    top = docs[0]
    assert META_KEYS <= set(top.metadata)
    assert top.metadata["doc_id"] == "d6" and top.metadata["rank"] == 1 and top.metadata["retriever"] == "rrf"
    assert top.metadata["tenant"] is None and top.id == top.metadata["chunk_id"]
    chunk = index.chunks[index.positions[top.metadata["chunk_id"]]]
    assert top.page_content == chunk.text and (top.metadata["start"], top.metadata["end"]) == (chunk.start, chunk.end)
    assert [d.metadata["rank"] for d in docs] == [1, 2, 3, 4, 5]
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)

    # the same as running the ragopt pipeline directly
    direct = Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever="hybrid"), k=5)).run("What causes ocean tides?")
    assert [d.metadata["chunk_id"] for d in docs] == [h.chunk.id for h in direct.hits]


def test_retriever_k_batch_and_composition(tiny_index: Any) -> None:
    index, embedder = tiny_index
    retriever = RagoptRetriever(pipeline=Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever="dense"), k=6)), k=2)
    assert len(retriever.invoke("How does a vaccine work?")) == 2
    batched = retriever.batch(["Who lays the eggs in a bee hive?", "What makes bread dough rise?"], config={"max_concurrency": 1})
    assert [b[0].metadata["doc_id"] for b in batched] == ["d3", "d5"]
    chain = retriever | RunnableLambda(lambda docs: " | ".join(d.metadata["doc_id"] for d in docs))
    assert chain.invoke("What is the Sicilian Defence in chess?").startswith("d8")
    assert retriever.run("How does a vaccine work?").trace.span("vector") is not None  # the trace stays reachable
    async_docs = asyncio.run(retriever.ainvoke("How does a vaccine work?"))
    assert [d.metadata["chunk_id"] for d in async_docs] == [d.metadata["chunk_id"] for d in retriever.invoke("How does a vaccine work?")]


@pytest.fixture
def tenant_pipeline(workspace: Path) -> Any:
    lc_docs = [
        LCDocument(page_content="North's payroll runs on the 25th of each month.", metadata={"id": "n1", "tenant": "north"}),
        LCDocument(page_content="South's payroll runs on the 1st of each month.", metadata={"id": "s1", "tenant": "south"}),
        LCDocument(page_content="North HR keeps salary bands confidential.", metadata={"id": "n2", "tenant": "north", "scopes": ["hr"], "year": 2024}),
        LCDocument(page_content="Everyone gets the staff handbook about payroll dates.", metadata={"id": "all", "title": "Handbook"}),
    ]
    docs = [Document.from_langchain(d) for d in lc_docs]
    embedder = make_embedder(workspace)
    report = build_index(docs, ChunkerConfig(mode="whole"), embedder, workspace, progress=False)
    return Pipeline(retrieval_stages(report.index, embedder, RetrievalConfig(retriever="hybrid"), k=10))


def test_retriever_runs_as_its_tenant(tenant_pipeline: Pipeline) -> None:
    north = RagoptRetriever(pipeline=tenant_pipeline, tenant="north")
    got = {d.metadata["doc_id"]: d for d in north.invoke("South's payroll runs on the 1st of each month.")}
    assert set(got) == {"n1", "all"}  # south's exact text, yet only north's and shared data
    assert got["n1"].metadata["tenant"] == "north" and got["all"].metadata["title"] == "Handbook"
    hr = RagoptRetriever(pipeline=tenant_pipeline, tenant="north", scopes=["hr"])
    hr_docs = {d.metadata["doc_id"]: d for d in hr.invoke("salary bands")}
    assert "n2" in hr_docs and hr_docs["n2"].metadata["year"] == 2024 and hr_docs["n2"].metadata["scopes"] == ["hr"]
    with pytest.raises(TenantRequired):
        RagoptRetriever(pipeline=tenant_pipeline).invoke("payroll")


def test_runnable_invoke_and_batch_on_every_input_kind(tenant_pipeline: Pipeline) -> None:
    chain = as_runnable(tenant_pipeline)
    assert isinstance(chain, Runnable)
    as_dict = chain.invoke({"text": "payroll dates", "tenant": "south"})
    assert isinstance(as_dict, list) and {d.metadata["doc_id"] for d in as_dict} == {"s1", "all"}
    as_query = chain.invoke(Query(text="salary bands", tenant="north", scopes=["hr"]))
    assert "n2" in {d.metadata["doc_id"] for d in as_query}
    inputs = [{"text": "payroll dates", "tenant": "south"}, Query(text="payroll", tenant="north"), {"text": "salary", "tenant": "north", "scopes": ["hr"]}]
    batched = chain.batch(inputs)
    assert [[d.metadata["chunk_id"] for d in out] for out in batched] == [
        [d.metadata["chunk_id"] for d in chain.invoke(i)] for i in inputs
    ]
    with pytest.raises(TenantRequired):
        chain.invoke("payroll")  # a plain string carries no tenant
    with pytest.raises(InputError, match="question"):
        chain.invoke({"question": "payroll", "tenant": "north"})
    with pytest.raises(InputError):
        chain.invoke({"tenant": "north"})
    with pytest.raises(InputError):
        chain.invoke(42)  # type: ignore[arg-type]


def test_runnable_returns_the_answer_text_when_the_pipeline_answers(tiny_index: Any) -> None:
    index, embedder = tiny_index
    stages = [*retrieval_stages(index, embedder, RetrievalConfig(retriever="bm25"), k=3), ExtractiveGenerator()]
    chain = as_runnable(stages)
    answer = chain.invoke("What causes ocean tides?")
    assert isinstance(answer, str) and "moon" in answer and "[1]" in answer
    direct = Pipeline(stages).run("What causes ocean tides?")
    assert answer == direct.answer.text  # type: ignore[union-attr]
    assert chain.batch(["What causes ocean tides?", "How does a vaccine work?"])[0] == answer


def test_hit_to_document_keeps_document_metadata_but_ragopt_keys_win(tiny_index: Any) -> None:
    from ragopt.types import Chunk, Hit

    chunk = Chunk(id="c1", doc_id="d1", start=3, end=9, text="abcdef", title="T", tenant="t", scopes=("a",), metadata={"score": "doc's own", "lang": "en"})
    doc = hit_to_document(Hit(chunk=chunk, score=0.25, rank=2, retriever="bm25"))
    assert doc.metadata["score"] == 0.25 and doc.metadata["lang"] == "en" and doc.metadata["rank"] == 2
    assert (doc.page_content, doc.id, doc.metadata["start"], doc.metadata["end"]) == ("abcdef", "c1", 3, 9)
    with pytest.raises(TypeError):
        RagoptRetriever(pipeline="not a pipeline")
