"""A user's own LangChain retriever as a ragopt stage: measured by eval and sweep like ragopt's retrievers,
and never a way around tenant permissions. The retriever is langchain-community's BM25Retriever, a real one."""

from __future__ import annotations

from typing import Any

import pytest

from fixtures.tiny_corpus import write_beir

from ragopt.config import ChunkerConfig, RetrievalConfig
from ragopt.data.beir import load_beir
from ragopt.errors import InputError
from ragopt.eval.runner import run_queries
from ragopt.eval.scoring import rank_scores
from ragopt.eval.sweep import SweepConfig, run_sweep
from ragopt.index import build_index, make_embedder
from ragopt.stages.langchain_retriever import LangChainRetrieve, LangChainRetrieverConfig, load_target
from ragopt.pipeline import Pipeline
from ragopt.types import Query

TARGET = "test_langchain_retriever:make_retriever"
_DOCS: list[Any] = []


def make_retriever() -> Any:
    """The factory a user names with --langchain: BM25 over the tiny corpus, ids in Document.id."""
    from langchain_community.retrievers import BM25Retriever

    return BM25Retriever.from_documents(_DOCS, k=5)


@pytest.fixture(scope="module")
def evalset(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("langchain_community")
    from langchain_core.documents import Document as LCDocument

    loaded = load_beir(write_beir(tmp_path_factory.mktemp("lc") / "tiny"))
    _DOCS[:] = [LCDocument(page_content=f"{d.title} {d.text}", id=d.id) for d in loaded.documents]
    return loaded


def test_eval_and_sweep_measure_a_langchain_retriever(evalset: Any, tmp_path: Any) -> None:
    ws = tmp_path / "ws"
    embedder = make_embedder(ws)
    index = build_index(evalset.documents, ChunkerConfig(mode="whole"), embedder, ws, progress=False, dense=False).index
    runs = run_queries(evalset, index, embedder, RetrievalConfig(retriever="langchain", langchain=TARGET), 5, progress=False)
    per_query = rank_scores(runs, evalset, ["recall@5", "ndcg@10"])
    ids = {d.id for d in evalset.documents}
    assert all(r.ranking and {doc for _, doc, _, _, _ in r.ranking} <= ids for r in runs)  # scored by the set's ids
    assert all(list(r.stage_ms) == ["langchain", "prompt"] for r in runs)
    config = SweepConfig(retrievers=["bm25", "langchain"], langchain=TARGET, top_k=[5])
    trials = {t.id: t for t in run_sweep(evalset, config, ws, progress=False).results.trials}
    assert trials["whole_langchain_k5"].per_query["ndcg@10"] == per_query["ndcg@10"]
    assert trials["whole_langchain_k5"].metrics["recall@5"] > 0.5


def test_documents_another_tenant_owns_are_dropped_and_counted(evalset: Any) -> None:
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.documents import Document as LCDocument

    docs = [LCDocument(page_content="tides and the moon", id="north-1", metadata={"tenant": "north", "scopes": ["ops"]}),
            LCDocument(page_content="tides and the moon again", id="south-1", metadata={"tenant": "south", "scopes": ["ops"]}),
            LCDocument(page_content="tides for everyone", id="shared-1")]
    stage = LangChainRetrieve(LangChainRetrieverConfig(target=TARGET), retriever=BM25Retriever.from_documents(docs, k=3))
    result = Pipeline([stage]).run(Query(text="tides moon", tenant="north", scopes=["ops"]))
    assert {h.chunk.doc_id for h in result.hits} == {"north-1", "shared-1"}
    assert result.trace.spans[0].usage.attrs["dropped_by_permissions"] == 1


def test_a_bad_target_is_an_input_error_naming_the_flag() -> None:
    for target in ("no_colon", "no_such_module_xyz:f", "test_langchain_retriever:absent"):
        with pytest.raises(InputError, match="--langchain"):
            load_target(target)
