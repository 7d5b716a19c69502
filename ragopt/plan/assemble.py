"""The one door: a plan (ragopt.plan.model.PlanConfig) over an open index becomes a Pipeline here. Its retrieval
stages (dense, bm25, or hybrid: both, then fusion), then every configured optional stage in slot order."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ragopt.backends.embeddings import Embedder
from ragopt.config import RetrievalConfig, StoreConfig, needs_vectors
from ragopt.errors import InputError
from ragopt.index import Index, build_index, make_embedder
from ragopt.pipeline import REQUEST_INPUTS, Pipeline, Stage, Step
from ragopt.plan.model import PlanConfig
from ragopt.plan.registry import stage_specs
from ragopt.stages.embedding import EmbedQuery
from ragopt.stages.fusion import Fuse
from ragopt.stages.keyword import KeywordSearch
from ragopt.stages.spec import CUT_SLOT, SLOTS, BuildContext
from ragopt.stages.vector import VectorSearch
from ragopt.types import Document


def retrieval_stages(
    index: Index, embedder: Embedder, config: RetrievalConfig, k: int | None = None, *, cache_queries: bool = True
) -> list[Stage]:
    """Stages that leave the best `k` (default `config.top_k`) hits in `state.hits`; `cache_queries=False`
    encodes every query afresh, for latency measurements that must not depend on earlier runs."""
    k = k or config.top_k
    if config.retriever == "langchain":
        from ragopt.stages.langchain_retriever import LangChainRetrieve, LangChainRetrieverConfig

        return [LangChainRetrieve(LangChainRetrieverConfig(target=config.langchain, k=k))]
    if needs_vectors(config.retriever):
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


def steps_by_slot(plan: PlanConfig, index: Index | None, embedder: Embedder, workspace: Path, *, resources: Any = None,
                  cache_queries: bool = False, skippable: bool = False) -> dict[str, list[Any]]:
    """The plan's steps grouped by slot (see ragopt.stages.spec.SLOTS): its retrieval stages over `index` (none
    without an index), then its optional stages. Serve runs the groups apart (retrieval is cached, generation
    guarded); `pipeline_for` runs them in slot order. `skippable`: the stages whose spec says a request survives
    their failure come as `Step(stage, required=False)` (a server skips them; a sweep measures them as they are)."""
    retrieval = [] if index is None else retrieval_stages(index, embedder, plan.retrieval, k=plan.candidate_depth(),
                                                          cache_queries=cache_queries)
    ctx = BuildContext(index=index, embedder=embedder, resources=resources if resources is not None else embedder.resources,
                       workspace=Path(workspace), plan=plan)
    return slot_steps(plan, ctx, retrieval, skippable=skippable)


def pipeline_for(plan: PlanConfig, index: Index | None, embedder: Embedder, workspace: Path, *, resources: Any = None,
                 memo: Any = None, cache_queries: bool = False, last_slot: str | None = None) -> Pipeline:
    """The one way a plan becomes a pipeline (eval, sweep, ask, serve and the LangChain adapter all come here):
    the plan's retrieval stages over `index`, then its optional stages in slot order (up to `last_slot` when
    given: a race screens trials up to their prompt, with no answer). Without an index the generator gets no
    passages: the request's empty hit list is its input."""
    by_slot = steps_by_slot(plan, index, embedder, workspace, resources=resources, cache_queries=cache_queries)
    slots = SLOTS if last_slot is None else SLOTS[: SLOTS.index(last_slot) + 1]
    steps = [step for slot in slots for step in by_slot[slot]]
    return Pipeline(steps, memo=memo) if index is not None else Pipeline(steps, memo=memo, inputs=(*REQUEST_INPUTS, "hits"))


def build_or_reuse_index(plan: PlanConfig, documents: Sequence[Document], workspace: Path, *, store: StoreConfig | None = None,
               resources: Any = None, progress: bool = True) -> tuple[Any, Embedder]:
    """Build (or reuse) the plan's index over `documents`: (build report, embedder). A plan a sweep measured with
    a store of its own (`PlanConfig.store`) gets that store, whatever `store` says: serve what was selected."""
    embedder = make_embedder(workspace, plan.embedder, resources)
    store = plan.store or store
    report = build_index(documents, plan.chunker, embedder, workspace, store_config=store, progress=progress, resources=resources,
                         dense=needs_vectors(plan.retrieval.retriever))
    return report, embedder


def open_plan(plan: PlanConfig, documents: Sequence[Document], workspace: Path, *, store: StoreConfig | None = None,
              resources: Any = None, progress: bool = True, cache_queries: bool = False) -> tuple[Pipeline, Any]:
    """Build (or reuse) the plan's index over `documents` and return (pipeline, build report)."""
    report, embedder = build_or_reuse_index(plan, documents, workspace, store=store, resources=resources, progress=progress)
    return pipeline_for(plan, report.index, embedder, workspace, resources=resources, cache_queries=cache_queries), report


def build_steps(plan: PlanConfig, ctx: BuildContext, retrieval: list[Any]) -> list[Any]:
    """The pipeline's steps for `plan` in slot order (see `slot_steps`)."""
    by_slot = slot_steps(plan, ctx, retrieval)
    return [step for slot in SLOTS for step in by_slot[slot]]


def slot_steps(plan: PlanConfig, ctx: BuildContext, retrieval: list[Any], *, skippable: bool = False) -> dict[str, list[Any]]:
    """The steps of each slot for `plan`: the retrieval stages given, and every configured optional stage
    (kinds a plan does not mention, or whose config switches them off, are left out). When a stage
    wanted more candidates than top_k (see `PlanConfig.candidate_depth`), the list is cut back to top_k after
    the rerank slot."""
    specs = stage_specs()
    unknown = sorted(set(plan.stages) - set(specs))
    if unknown:
        raise InputError(f"unknown stage kind {unknown[0]!r}", field="stages")
    ctx.retrieval = list(retrieval)
    by_slot: dict[str, list[Any]] = {slot: [] for slot in SLOTS}
    for kind in sorted(plan.stages, key=lambda k: (SLOTS.index(specs[k].slot), k)):
        spec = specs[kind]
        built = spec.build(plan.stage_config(kind), ctx)
        if built is None:
            continue
        built = built if isinstance(built, list) else [built]
        if spec.replaces_retrieval:
            ctx.retrieval = built
            continue
        for b in built:  # a stage may name a later slot of its own (a tool's step that reads the answer)
            by_slot[getattr(b, "slot", spec.slot)].append(Step(b, required=False) if skippable and spec.skippable else b)
    by_slot["retrieval"] = ctx.retrieval
    if plan.candidate_depth() > plan.retrieval.top_k:
        from ragopt.stages.keep_top import KeepTop

        by_slot[CUT_SLOT].append(KeepTop(plan.retrieval.top_k))
    return by_slot
