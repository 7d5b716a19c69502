"""Builds and scores sweep trials: one open index per (embedder, chunker) and one stage memo for a whole sweep,
shared by the local executor (ragopt.eval.sweep) and Ray tasks (ragopt.eval.ray_executor)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from ragopt.config import needs_vectors
from ragopt.data import EvalSet
from ragopt.eval import metrics as M
from ragopt.eval.executor import QueryOutcome, measuring_context, run_trial
from ragopt.eval.results import ROUTED_SMALL_SHARE, Costs, Trial, TrialParams
from ragopt.eval.scoring import route_scores, trial_scores
from ragopt.eval.space import SweepConfig
from ragopt.plan import PlanConfig
from ragopt.plan.saved import plan_models
from ragopt.trace import percentiles


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class TrialRunner:
    """Builds and runs trial plans over one evaluation set, keeping one open index per (embedder, chunker)
    and one stage memo for the whole sweep."""

    def __init__(self, evalset: EvalSet, config: SweepConfig, workspace: Path, resources: Any, *,
                 progress: bool, remeasure: bool):
        from ragopt.cache import workspace_cache
        from ragopt.memo import StageMemo

        self.evalset, self.config, self.workspace, self.resources = evalset, config, workspace, resources
        self.progress = progress
        self.cache = workspace_cache(workspace)
        if remeasure:
            from ragopt.eval.executor import NAMESPACE as TRIALS
            from ragopt.memo import NAMESPACE as MEMO

            for namespace in (TRIALS, MEMO):
                self.cache.evict(namespace)
        self.context = measuring_context()
        self._chunks: dict[str, Any] = {}  # chunk id -> Chunk over every open index (ids carry the chunker)
        self.memo = StageMemo(self.cache, self.context, self._chunks.get)
        self.judge: Any = None  # a SweepJudge when the sweep judges its answers (ragopt.eval.judged)
        self._indexes: dict[str, Any] = {}
        self._embedders: dict[str, Any] = {}

    def embedder(self, plan: PlanConfig) -> Any:
        from ragopt.index import make_embedder

        key = plan.embedder.fingerprint()
        if key not in self._embedders:
            self._embedders[key] = make_embedder(self.workspace, plan.embedder, self.resources)
        return self._embedders[key]

    def index(self, plan: PlanConfig) -> Any:
        """The index of the plan's embedder and chunker, built or reused on first use."""
        from ragopt.index import build_index

        embedder = self.embedder(plan)
        store = plan.store or self.config.store  # a swept store: its shard settings make another index
        key = f"{plan.embedder.fingerprint()}:{plan.chunker.fingerprint()}:{store.engine}:{store.shard_settings()}"
        if key not in self._indexes:
            report = build_index(
                self.evalset.documents, plan.chunker, embedder, self.workspace, store_config=store,
                progress=self.progress, resources=self.resources, dense=any(map(needs_vectors, self.config.retrievers)),
            )
            m = report.index.manifest
            _log(f"index {m.id} ({m.chunker.label}): {m.n_chunks} chunks, "
                 + ("reused" if report.reused else f"built in {report.seconds:.1f} s, embedded {report.embedded} texts"))
            warning = report.reach_warning(embedder) if any(map(needs_vectors, self.config.retrievers)) else None
            if warning:
                _log(warning)
            self._chunks.update((c.id, c) for c in report.index.chunks)
            self._indexes[key] = report.index
        return self._indexes[key].searched_with(store)

    def run(self, plan: PlanConfig, queries: list[Any], desc: str, last_slot: str | None = None) -> tuple[list[QueryOutcome], Any]:
        """The plan's outcomes on `queries` (its stages up to `last_slot` when given), and the index it ran over."""
        from ragopt.plan import pipeline_for

        index = self.index(plan)
        pipeline = pipeline_for(plan, index, self.embedder(plan), self.workspace, resources=self.resources, memo=self.memo,
                                last_slot=last_slot)
        outcomes, _ = run_trial(pipeline, queries, cache=self.cache, context=self.context,
                                     progress=self.progress, desc=desc)
        return outcomes, index

    def close(self) -> None:
        self.memo.flush()
        self.cache.close()


def score_trial(
    trial_id: str, plan: PlanConfig, outcomes: list[QueryOutcome], index: Any,
    evalset: EvalSet, config: SweepConfig, names: list[str], keep: set[str], cache: Any, judge: Any = None,
) -> Trial:
    per_query = dict(trial_scores(outcomes, evalset, config, names, cache, index.manifest.corpus_fingerprint))
    judged = None
    if config.answers_on() and ROUTED_SMALL_SHARE in names:  # what the plan's routing cost: not remembered, cheap
        per_query.update(route_scores(outcomes, plan.routing()))
    if config.answers_on() and judge is not None:  # ragopt.eval.judged.SweepJudge
        judged = judge.score(trial_id, outcomes, evalset, index, cache)
        per_query.update({n: v for n, v in judged.per_query.items() if n in names})
    stage_ms: dict[str, list[float]] = {}
    for o in outcomes:
        for stage, ms in o.stage_ms.items():
            stage_ms.setdefault(stage, []).append(ms)
    latency_costs = {f"{stage}_{p}_ms": percentiles(ms)[p] for stage, ms in stage_ms.items() for p in ("p50", "p95")}
    lat = percentiles([o.ms for o in outcomes])
    prompt_tokens = [o.prompt_tokens for o in outcomes]  # the fitted prompt, as the generator receives it
    context = float(np.mean(prompt_tokens)) if prompt_tokens and None not in prompt_tokens else None
    m = index.manifest
    chunker = plan.chunker
    params = TrialParams(
        chunker=chunker.label,
        chunk_size=None if chunker.chunker == "whole" else chunker.size,
        chunk_overlap=None if chunker.chunker == "whole" else chunker.overlap,
        retriever=plan.retrieval.retriever,
        fusion=plan.retrieval.fusion.method if plan.retrieval.retriever == "hybrid" else None,
        alpha=plan.retrieval.fusion.alpha if plan.retrieval.retriever == "hybrid" and plan.retrieval.fusion.method == "convex" else None,
        top_k=plan.retrieval.top_k,
        **({"embedder": plan.embedder.model} if len(config.embedder_configs()) > 1 else {}),
        **({"analyzer": plan.retrieval.bm25.analyzer} if len(config.bm25_configs()) > 1 else {}),
        **plan.params(),
    )
    return Trial(
        id=trial_id,
        params=params,
        metrics={n: M.mean(v) for n, v in per_query.items()},
        costs=Costs(
            p50_ms=lat["p50"], p95_ms=lat["p95"], p99_ms=lat["p99"], context_tokens=context,
            index_build_s=m.build_s, index_bytes=index.size_bytes(), n_chunks=m.n_chunks, chunks_cut=_chunks_cut(plan, m),
            latency_cached=any(o.from_earlier_run for o in outcomes), **latency_costs, **(judged.costs if judged else {}),
        ),
        per_query={n: v for n, v in per_query.items() if n in keep or (judged and n in judged.per_query)},
        intervals={n: iv for n, iv in judged.intervals.items() if n in names} if judged else {},
        unsupported=judged.unsupported if judged else {},
        plan=plan.model_dump(mode="json"),
        models={role: ref.model_dump() for role, ref in plan_models(plan, m.embedder_fingerprint).items()},
    )


def _chunks_cut(plan: PlanConfig, manifest: Any) -> float | None:
    """The share of the index's chunks the embedder reads the beginning of only, for a trial that embeds them."""
    if not needs_vectors(plan.retrieval.retriever) or plan.embedder.long_chunks != "truncate":
        return None
    return manifest.embedder_cut
