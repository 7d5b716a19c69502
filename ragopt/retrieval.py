"""Assembles pipelines: the retrieval stages for a configuration (dense, bm25, or hybrid: both, then fusion),
and whole plans (ragopt.plan) over an open index."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig, StoreConfig
from ragopt.index import Index, build_index, make_embedder
from ragopt.pipeline import Pipeline, Stage
from ragopt.plan import BuildContext, PlanConfig, build_steps
from ragopt.resources import Resources
from ragopt.types import Document
from ragopt.stages.embedding import Embedder, EmbedQuery
from ragopt.stages.fusion import Fuse
from ragopt.stages.keyword import KeywordSearch
from ragopt.stages.vector import VectorSearch


def retrieval_stages(
    index: Index, embedder: Embedder, config: RetrievalConfig, k: int | None = None, *, cache_queries: bool = True
) -> list[Stage]:
    """Stages that leave the best `k` (default `config.top_k`) hits in `state.hits`; `cache_queries=False`
    encodes every query afresh, for latency measurements that must not depend on earlier runs."""
    k = k or config.top_k
    if config.retriever == "langchain":
        from ragopt.interop.langchain_stage import LangChainRetrieve, LangChainRetrieverConfig

        return [LangChainRetrieve(LangChainRetrieverConfig(target=config.langchain, k=k))]
    if config.retriever != "bm25":
        index.ensure_vectors(embedder)
    if config.retriever == "dense":
        return [EmbedQuery(embedder, cache_queries), VectorSearch(index, k)]
    if config.retriever == "bm25":
        return [KeywordSearch(index, config.bm25, k)]
    depth = max(k, config.fusion.depth)
    return [
        EmbedQuery(embedder, cache_queries),
        VectorSearch(index, depth),
        KeywordSearch(index, config.bm25, depth),
        Fuse(config.fusion, k),
    ]


def pipeline_for(plan: PlanConfig, index: Index, embedder: Embedder, workspace: Path, *, resources: Any = None,
                 memo: Any = None, cache_queries: bool = False) -> Pipeline:
    """The one way a plan becomes a pipeline (eval, sweep, ask and the LangChain adapter all come here):
    the plan's retrieval stages over `index`, then its optional stages in slot order."""
    retrieval = retrieval_stages(index, embedder, plan.retrieval, k=plan.candidate_depth(), cache_queries=cache_queries)
    ctx = BuildContext(index=index, embedder=embedder, resources=resources if resources is not None else embedder.resources,
                       workspace=Path(workspace), plan=plan)
    return Pipeline(build_steps(plan, ctx, retrieval), memo=memo)


def open_plan(plan: PlanConfig, documents: Sequence[Document], workspace: Path, *, store: StoreConfig | None = None,
              resources: Any = None, progress: bool = True, cache_queries: bool = False) -> tuple[Pipeline, Any]:
    """Build (or reuse) the plan's index over `documents` and return (pipeline, build report)."""
    embedder = make_embedder(workspace, plan.embedder, resources)
    report = build_index(documents, plan.chunker, embedder, workspace, store_config=store, progress=progress, resources=resources,
                         dense=plan.retrieval.retriever in ("dense", "hybrid"))
    return pipeline_for(plan, report.index, embedder, workspace, resources=resources, cache_queries=cache_queries), report


def build_retrieval_stages(
    dataset: str | Path,
    workspace: Path,
    config: RetrievalConfig | None = None,
    chunker: ChunkerConfig | None = None,
    embedder_config: EmbedderConfig | None = None,
    store: StoreConfig | None = None,
    split: str = "test",
    resources: Resources | None = None,
) -> list[Stage]:
    """Load an evaluation set's corpus, build (or reuse) its index, and return its retrieval stages; the
    model and index are held by `resources` (a private one when None)."""
    from ragopt.data import load_evalset

    evalset = load_evalset(dataset, split=split)
    embedder = make_embedder(workspace, embedder_config, resources)
    config = config or RetrievalConfig()
    report = build_index(
        evalset.documents, chunker or ChunkerConfig(), embedder, workspace, store_config=store, dense=config.retriever != "bm25"
    )
    return retrieval_stages(report.index, embedder, config)
