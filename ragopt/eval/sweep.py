"""The sweep engine: chunker x retriever x fusion x TopK against quality metrics, with costs beside them.

Shared work is never repeated: one index per distinct chunker config (reused across runs by fingerprint),
retrieval once per query at the largest K with every smaller K scored by truncation, query embeddings
embedded once and cached, and each (index, retriever) run cached, so a warm re-run only recomputes metrics.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from ragopt import __version__
from ragopt.cache import CacheKey
from ragopt.config import (
    BM25Config,
    ChunkerConfig,
    EmbedderConfig,
    FusionConfig,
    RetrievalConfig,
    StoreConfig,
    StrictModel,
    fingerprint,
)
from ragopt.data import EvalSet
from ragopt.eval import metrics as M
from ragopt.eval.gates import check_known, evaluate_gates, objective_for, select
from ragopt.errors import InputError
from ragopt.eval.results import COST_NAMES, Costs, DatasetInfo, ModelInfo, SweepResults, Trial, TrialParams, Versions
from ragopt.pipeline import Pipeline, RequestState
from ragopt.stages.embedding import EmbedQuery
from ragopt.stages.fusion import Fuse
from ragopt.stages.keyword import KeywordSearch
from ragopt.stages.vector import VectorSearch
from ragopt.eval.runner import best_per_doc, write_trec
from ragopt.index import Index, build_index, corpus_fingerprint, default_cache, make_embedder
from ragopt.stages.embedding import Embedder
from ragopt.tokencount import token_counter
from ragopt.trace import percentiles

RANK_METRICS = ("recall", "ndcg", "mrr", "precision", "hit")
# Part of the key of every cached ranking and timing: bump it when retrieval code changes what it returns.
RETRIEVAL_VERSION = 1
PER_QUERY_ALWAYS = ("ndcg@10", "recall@10")
CITATION_METRICS = ("citation_precision", "citation_recall", "citation_valid_share")


class BaselineConfig(StrictModel):
    path: str
    tolerance: float = Field(0.02, ge=0)
    metrics: list[str] | None = None


class SweepConfig(StrictModel):
    """A search space and its gates; loadable from TOML (see pipelines/*.toml)."""

    dataset: str | None = None
    split: str = "test"
    chunk_sizes: list[int | Literal["whole"]] = Field(default_factory=lambda: ["whole"])
    chunk_overlaps: list[int] = Field(default_factory=lambda: [0], description="token overlaps, each tried with each size")
    retrievers: list[Literal["dense", "bm25", "hybrid"]] = Field(default_factory=lambda: ["dense", "bm25", "hybrid"])
    fusions: list[Literal["rrf", "convex"]] = Field(default_factory=lambda: ["rrf"])
    alphas: list[float] = Field(default_factory=lambda: [0.5])
    top_k: list[int] = Field(default_factory=lambda: [1, 3, 5, 10, 20])
    gates: list[str] = Field(default_factory=list)
    embedder: EmbedderConfig = EmbedderConfig()
    bm25: BM25Config = BM25Config()
    fusion_depth: int = Field(100, gt=0)
    store: StoreConfig = StoreConfig()
    baseline: BaselineConfig | None = None
    answers: Literal["none", "extractive"] = Field(
        "none", description="answer every query from each trial's top-k with the extractive generator, scoring citations"
    )
    answer_metrics: list[str] = Field(default_factory=lambda: ["string_presence", "rouge_l"])
    context_tokenizer: str = Field(
        "embedder", description='count context tokens with "embedder", "generator" (the default GGUF) or a GGUF path'
    )

    @field_validator("top_k")
    @classmethod
    def _positive_k(cls, v: list[int]) -> list[int]:
        if not v or any(k <= 0 for k in v):
            raise ValueError("top_k must be a non-empty list of positive integers")
        return sorted(set(v))

    @field_validator("alphas")
    @classmethod
    def _alpha_range(cls, v: list[float]) -> list[float]:
        if any(not 0 <= a <= 1 for a in v):
            raise ValueError("every alpha must lie in [0, 1]")
        return v

    @model_validator(mode="after")
    def _non_empty(self) -> "SweepConfig":
        if any(o < 0 for o in self.chunk_overlaps):
            raise ValueError("chunk_overlaps must not be negative")
        for name in ("chunk_sizes", "chunk_overlaps", "retrievers", "fusions"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        return self

    def chunkers(self) -> list[ChunkerConfig]:
        configs = []
        for size in self.chunk_sizes:
            if size == "whole":
                configs.append(ChunkerConfig(mode="whole"))
            else:  # an overlap as large as the chunk is meaningless: skip it for that size only
                configs += [ChunkerConfig(mode="tokens", size=size, overlap=o) for o in self.chunk_overlaps if o < size]
        return configs

    def retrieval_variants(self) -> list[RetrievalConfig]:
        variants = []
        for retriever in self.retrievers:
            fusions = [FusionConfig()] if retriever != "hybrid" else [
                FusionConfig(method=f, alpha=a, depth=self.fusion_depth)
                for f in self.fusions
                for a in (self.alphas if f == "convex" else [0.5])
            ]
            variants += [RetrievalConfig(retriever=retriever, top_k=max(self.top_k), fusion=fu, bm25=self.bm25) for fu in fusions]
        return variants

    def cutoffs(self) -> list[int]:
        """Every K a metric is reported at: the top_k values, 10, and any K a gate names."""
        gate_ks = {int(k) for g in self.gates for k in re.findall(r"@(\d+)", g)}
        return sorted(set(self.top_k) | {10} | gate_ks)

    def metric_names(self, with_spans: bool, with_references: bool) -> list[str]:
        names = [f"{m}@{k}" for m in RANK_METRICS for k in self.cutoffs()]
        names += [f"span_recall@{k}" for k in self.cutoffs()] if with_spans else []
        if self.answers != "none":
            names += list(CITATION_METRICS) + (list(self.answer_metrics) if with_references else [])
        return names


@dataclass
class SweepOutcome:
    results: SweepResults
    latencies: dict[str, list[float]] = field(default_factory=dict)  # trial id -> per-query ms
    reasons: dict[str, list[str]] = field(default_factory=dict)  # failing trial id -> why
    seconds: float = 0.0


def trial_id(chunker: ChunkerConfig, config: RetrievalConfig, k: int) -> str:
    chunk = "whole" if chunker.mode == "whole" else f"c{chunker.size}-o{chunker.overlap}"
    retr = config.retriever
    if retr == "hybrid":
        retr += f"-{config.fusion.method}" + (f"{config.fusion.alpha:g}" if config.fusion.method == "convex" else "")
    return f"{chunk}_{retr}_k{k}"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _measurement_key(namespace: str, model: str, kb_version: str, queries_fp: str, **payload: Any) -> CacheKey:
    """Cached measurements are keyed by everything that can change them, the ragopt code included."""
    return CacheKey(
        namespace=namespace,
        model=model,
        kb_version=kb_version,
        payload={"code": [__version__, RETRIEVAL_VERSION], "queries": queries_fp, **payload},
    )


class _QueryEmbeddingTimer:
    """Embeds every query once, one at a time as a live request would, timing each and caching the
    vector; dense and hybrid trials then add this measured time to their per-query latency. A warm re-run
    reuses the measured times (`cached` says so) unless the sweep runs with `remeasure`."""

    def __init__(self, embedder: Embedder, evalset: EvalSet, queries_fp: str):
        self.embedder, self.evalset = embedder, evalset
        self.key = _measurement_key(
            "sweep-query-embed-ms", embedder.fingerprint, "", queries_fp, normalize=embedder.config.normalize
        )
        self._ms: list[float] | None = None
        self.cached = False

    @property
    def ms(self) -> list[float]:
        if self._ms is None:
            self._ms = self.embedder.cache.get(self.key)
            self.cached = self._ms is not None
            if self._ms is None:
                self._ms = self._measure()
                self.embedder.cache.set(self.key, self._ms)
        return self._ms

    def _measure(self) -> list[float]:
        """Each query encoded alone (`use_cache=False`, as `ragopt eval` times it), which also caches its vector."""
        import torch

        self.embedder.model  # loaded before timing
        ms: list[float] = []
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one request, one thread: stable under contention (see NOTES)
        try:
            for q in self.evalset.queries:
                t0 = time.perf_counter()
                self.embedder.encode([q.query.text], [(q.query.tenant, q.query.scopes)], use_cache=False)
                ms.append((time.perf_counter() - t0) * 1000)
        finally:
            torch.set_num_threads(threads)
        return ms


def _shared_retrieval(
    index: Index, embedder: Embedder, evalset: EvalSet, config: SweepConfig, depth: int, queries_fp: str, progress: bool
) -> dict[str, Any]:
    """Vector and BM25 candidates of every query at `depth`, run once per index and shared by every
    retriever variant and K (both searches are exact, so a shorter list is the head of a longer one).
    Per query: {"vector"/"bm25": [(chunk position, score), ...]} and the ms of each search. Cached."""
    from tqdm import tqdm

    kinds = {r for r in config.retrievers}
    stages: list[Any] = []
    if kinds & {"dense", "hybrid"}:
        stages += [EmbedQuery(embedder), VectorSearch(index, depth)]
    if kinds & {"bm25", "hybrid"}:
        stages.append(KeywordSearch(index, config.bm25, depth))
    cache = default_cache(index.path.parent.parent)
    key = _measurement_key(
        "sweep-retrieval", embedder.fingerprint, index.manifest.id, queries_fp,
        stages=[st.name for st in stages], bm25=config.bm25.model_dump(mode="json"), depth=depth,
    )
    stored = cache.get(key)
    if stored is not None:
        stored["cached"] = True
    else:
        pipeline = Pipeline(stages)
        position = index.positions
        stored = {name: [] for name in ("vector", "bm25", "vector_ms", "bm25_ms")}
        for q in tqdm(evalset.queries, desc="retrieval", disable=not progress, leave=False):
            result = pipeline.run(q.query)
            for name, hits in result.state.candidates.items():
                stored[name].append([(position[h.chunk.id], h.score) for h in hits])
                stored[f"{name}_ms"].append(result.trace.span(name).ms)
        cache.set(key, stored)
        stored["cached"] = False
    cache.close()
    return stored


def _variant_hits(
    variant: RetrievalConfig, shared: dict[str, Any], index: Index, evalset: EvalSet, timer: _QueryEmbeddingTimer, k: int
) -> tuple[list[list[tuple[int, float]]], dict[str, list[float]]]:
    """One retriever variant's top-k per query, and per stage the ms each query spent there."""
    if variant.retriever == "bm25":
        return [h[:k] for h in shared["bm25"]], {"bm25": list(shared["bm25_ms"])}
    dense_ms = {"embed": list(timer.ms), "vector": list(shared["vector_ms"])}
    if variant.retriever == "dense":
        return [h[:k] for h in shared["vector"]], dense_ms
    fuse = Pipeline([Fuse(variant.fusion, k)])
    position = index.positions
    out, fuse_ms = [], []
    for q, vec, kw in zip(evalset.queries, shared["vector"], shared["bm25"]):
        state = RequestState(query=q.query)
        for name, found in (("vector", vec), ("bm25", kw)):
            state.candidates[name] = index.hits(found[: max(variant.fusion.depth, k)], name)
        result = fuse.run_state(state)
        out.append([(position[h.chunk.id], h.score) for h in result.hits])
        fuse_ms.append(result.trace.total_ms)
    return out, {**dense_ms, "bm25": list(shared["bm25_ms"]), "fuse": fuse_ms}


def _check_answer_metrics(names: list[str]) -> None:
    """Before any work: the metrics exist, need nothing the sweep cannot give, and ragas is installed."""
    from ragopt.eval.answers import CONTEXT_METRICS, AnswerMetricsUnavailable, check_metrics, load_ragas

    for name in check_metrics(names):
        if name in CONTEXT_METRICS:
            raise InputError(f"{name} needs reference contexts, which a sweep's answers do not carry", field="answer_metrics")
    try:
        load_ragas()
    except AnswerMetricsUnavailable as exc:
        raise InputError(str(exc), field="answers") from None


def _answer_scores(
    evalset: EvalSet, index: Index, top: list[list[tuple[int, float]]], config: SweepConfig, with_references: bool
) -> dict[str, list[float | None]]:
    """Answer each query from its top-k with the extractive generator; score its citations against the gold
    evidence documents (else the relevant ones) and, where references exist, the answer text."""
    from ragopt.eval.answers import AnswerSample, score_answers
    from ragopt.eval.citations import citation_scores
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    generator = ExtractiveGenerator()
    scores: dict[str, list[float | None]] = {name: [] for name in CITATION_METRICS}
    samples = []
    for q, hits in zip(evalset.queries, top):
        state = RequestState(query=q.query)
        state.hits = index.hits(hits, "sweep")
        answer = generator.run(state).answer
        gold = [e.doc_id for e in q.evidence] or [d for d, grade in q.relevance.items() if grade > 0]
        cs = citation_scores(answer, gold)
        scores["citation_precision"].append(cs.precision)
        scores["citation_recall"].append(cs.recall)
        scores["citation_valid_share"].append(cs.valid_share)
        samples.append(AnswerSample(response=answer.text, reference=q.reference_answer))
    if with_references:
        scores.update(score_answers(samples, config.answer_metrics))
    return {name: [float("nan") if v is None else v for v in values] for name, values in scores.items()}


def run_sweep(
    evalset: EvalSet,
    config: SweepConfig,
    workspace: Path,
    *,
    progress: bool = True,
    runs_dir: Path | None = None,
    remeasure: bool = False,
) -> SweepOutcome:
    """Run every trial; with `runs_dir`, also write each trial's ranking as a TREC run file there. Timings
    measured by an earlier run of the same sweep are reused (costs say `latency_cached`) unless `remeasure`."""
    from tqdm import tqdm

    t_start = time.perf_counter()
    with_spans = any(q.evidence and any(e.start is not None for e in q.evidence) for q in evalset.queries)
    with_references = any(q.reference_answer for q in evalset.queries)
    names = config.metric_names(with_spans, with_references)
    if config.answers != "none" and with_references:
        _check_answer_metrics(config.answer_metrics)
    gates = check_known(config.gates, names + list(COST_NAMES))
    embedder = make_embedder(workspace, config.embedder)
    qids = [q.query.id for q in evalset.queries]
    qrels = {q.query.id: q.relevance for q in evalset.queries}
    evidence = {q.query.id: q.evidence for q in evalset.queries}
    per_query_keep = set(PER_QUERY_ALWAYS) | {g.metric for g in gates if g.metric in names}
    if config.baseline and config.baseline.metrics:
        per_query_keep |= set(config.baseline.metrics)
    if remeasure:
        for namespace in ("sweep-retrieval", "sweep-query-embed-ms"):
            embedder.cache.evict(namespace)
    queries_fp = fingerprint([q.query.model_dump(mode="json") for q in evalset.queries])
    timer = _QueryEmbeddingTimer(embedder, evalset, queries_fp)
    counter = token_counter(config.context_tokenizer, config.embedder)
    max_k = max(config.top_k)
    variants = config.retrieval_variants()
    depth = max(max_k, config.fusion_depth if "hybrid" in config.retrievers else 0)
    trials: list[Trial] = []
    latencies: dict[str, list[float]] = {}
    chunkers = config.chunkers()
    for chunker_cfg in tqdm(chunkers, desc="chunkers", disable=not progress):
        report = build_index(
            evalset.documents, chunker_cfg, embedder, workspace, store_config=config.store, progress=progress,
            dense=bool({"dense", "hybrid"} & set(config.retrievers)),
        )
        index = report.index
        m = index.manifest
        _log(f"index {m.id} ({m.chunker.label}): {m.n_chunks} chunks, "
             + ("reused" if report.reused else f"built in {report.seconds:.1f} s, embedded {report.embedded} texts"))
        tokens = index.token_counts(counter)
        index_costs = {"index_build_s": m.build_s, "index_bytes": index.size_bytes(), "n_chunks": m.n_chunks}
        shared = _shared_retrieval(index, embedder, evalset, config, depth, queries_fp, progress)
        for variant in variants:
            hits, stage_ms = _variant_hits(variant, shared, index, evalset, timer, max_k)
            query_ms = [sum(per_stage) for per_stage in zip(*stage_ms.values())]  # the stages run one after another
            latency_costs = {
                f"{stage}_{p}_ms": percentiles(ms)[p] for stage, ms in stage_ms.items() for p in ("p50", "p95")
            }
            latency_costs["latency_cached"] = shared["cached"] and (variant.retriever == "bm25" or timer.cached)
            lat = percentiles(query_ms)
            for k in config.top_k:
                top = [h[:k] for h in hits]
                run = {qid: M.doc_ranking(index.chunks[i].doc_id for i, _ in t) for qid, t in zip(qids, top)}
                rank_names = [n for n in names if "@" in n and not n.startswith("span_")]
                per_query = M.evaluate_run(run, qrels, rank_names, query_ids=qids)
                if with_spans:
                    spans = {qid: [(index.chunks[i].doc_id, index.chunks[i].start, index.chunks[i].end) for i, _ in t]
                             for qid, t in zip(qids, top)}
                    per_query.update(M.evaluate_spans(spans, evidence, config.cutoffs(), query_ids=qids))
                if config.answers != "none":
                    per_query.update(_answer_scores(evalset, index, top, config, with_references))
                tid = trial_id(chunker_cfg, variant, k)
                if runs_dir is not None:
                    write_trec(runs_dir / f"{tid}.trec", tid, zip(qids, (best_per_doc((index.chunks[i].doc_id, sc) for i, sc in t) for t in top)))
                trials.append(
                    Trial(
                        id=tid,
                        params=TrialParams(
                            chunker=chunker_cfg.label,
                            chunk_size=None if chunker_cfg.mode == "whole" else chunker_cfg.size,
                            chunk_overlap=None if chunker_cfg.mode == "whole" else chunker_cfg.overlap,
                            retriever=variant.retriever,
                            fusion=variant.fusion.method if variant.retriever == "hybrid" else None,
                            alpha=variant.fusion.alpha if variant.fusion.method == "convex" and variant.retriever == "hybrid" else None,
                            top_k=k,
                        ),
                        metrics={n: M.mean(v) for n, v in per_query.items()},
                        costs=Costs(
                            p50_ms=lat["p50"], p95_ms=lat["p95"], p99_ms=lat["p99"],
                            context_tokens=float(np.mean([sum(int(tokens[i]) for i, _ in t) for t in top])),
                            **index_costs,
                            **latency_costs,
                        ),
                        per_query={n: v for n, v in per_query.items() if n in per_query_keep},
                    )
                )
                latencies[tid] = query_ms
    selected, reasons = select(trials, gates)
    results = SweepResults(
        dataset=DatasetInfo(
            name=evalset.name, path=evalset.source, fingerprint=corpus_fingerprint(evalset.documents) + ":" + fingerprint(qrels),
            n_documents=len(evalset.documents), n_queries=len(qids),
        ),
        versions=Versions.collect(),
        models={
            "embedder": ModelInfo(name=config.embedder.model, fingerprint=embedder.fingerprint),
            "context_tokenizer": ModelInfo(name=counter.name, fingerprint=counter.fingerprint),
        },
        search_space=config.model_dump(mode="json", exclude={"baseline", "store"}),
        objective=objective_for(gates),
        gates=[g.expr for g in gates],
        trials=trials,
        selected=selected.id if selected else None,
        verdicts={t.id: evaluate_gates(t, gates) for t in trials},
        query_ids=qids,
    )
    return SweepOutcome(results, latencies, reasons, time.perf_counter() - t_start)


