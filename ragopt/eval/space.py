"""A sweep's search space: the retrieval dimensions (chunker x retriever x fusion x TopK) and every optional
stage's knobs, read from the stage declarations (ragopt.plan), as a grid of trial plans or dimensions for a
sampler. Loadable from TOML (see pipelines/*.toml):

    [stages.rerank]
    model = "trained:train"      # a fixed setting
    depth = [0, 20, 50]          # a list on a knob is a dimension of the search space
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ragopt.config import (BM25Config, ChunkerConfig, EmbedderConfig, check_embedder_name, FusionConfig, RetrievalConfig, StoreConfig,
                           StrictModel, fingerprint, knobs, validate)
from ragopt.errors import InputError
from ragopt.eval.chunker_space import check_chunker_knobs, chunker_grid, chunker_label
from ragopt.eval.metrics import CHAR_METRICS
from ragopt.eval.results import ROUTED_SMALL_SHARE
from ragopt.judge.judges import JudgeConfig
from ragopt.judge.judging import METRICS as JUDGED_METRICS
from ragopt.plan import PlanConfig, kind_in_slot, spec_for, validate_stage_values
from ragopt.plan.model import STORE_KNOBS
from ragopt.stages.spec import GENERATE_SLOT, PROMPT_SLOT, ROUTED

RANK_METRICS = ("recall", "ndcg", "mrr", "precision", "hit")
CITATION_METRICS = ("citation_precision", "citation_recall", "citation_valid_share", "citation_span_precision",
                    "citation_span_recall", "citation_floor_precision", "citation_floor_span_precision",
                    "answer_contains_reference", "answer_lead_contains_reference", "citation_span_precision_if_correct",
                    "citation_floor_span_precision_if_correct")
# questions that need a document and live data (a tool, ragopt.stages.tool), each part scored on its own; an answer
# marked incomplete is never right about the live part
LIVE_METRICS = ("doc_part_contains_reference", "live_part_contains_reference", "incomplete_share")


class BaselineConfig(StrictModel):
    path: str
    tolerance: float = Field(0.02, ge=0)
    metrics: list[str] | None = None


class SweepConfig(StrictModel):
    """A search space, its gates and how to select; loadable from TOML (see pipelines/*.toml)."""

    dataset: str | None = None
    default_for_dataset: bool = Field(
        False, description="a shipped config (pipelines/) that `ragopt sweep --dataset D` uses when D is its dataset and no --config is given")
    split: str = "test"
    chunk_sizes: list[int | Literal["whole"]] = Field(default_factory=lambda: ["whole"])
    chunk_overlaps: list[int] = Field(default_factory=lambda: [0], description="token overlaps, each tried with each size")
    chunkers: list[Literal["tokens", "recursive", "semantic", "whole"]] = Field(
        default_factory=lambda: ["tokens"], description="chunkers tried at each chunk size (docs/chunking.md); whole once")
    chunker: dict[str, Any] = Field(default_factory=dict, description="[chunker] knobs; a list on a knob sweeps it "
                                                                      "for the chunkers that read it")
    retrievers: list[Literal["dense", "bm25", "hybrid", "langchain"]] = Field(default_factory=lambda: ["dense", "bm25", "hybrid"])
    langchain: str | None = Field(None, description='retriever "langchain": your LangChain retriever as "module:attribute"')
    fusions: list[Literal["rrf", "convex"]] = Field(default_factory=lambda: ["rrf"])
    alphas: list[float] = Field(default_factory=lambda: [0.5])
    top_k: list[int] = Field(default_factory=lambda: [1, 3, 5, 10, 20])
    gates: list[str] = Field(default_factory=list)
    embedder: EmbedderConfig = EmbedderConfig()
    embedders: list[str] = Field(default_factory=list, description="embedder models to compare (default: embedder.model)")
    bm25: BM25Config = BM25Config()
    analyzers: list[Literal["auto", "english", "chinese", "whitespace"]] = Field(
        default_factory=list, description="BM25 analyzers to compare, for the bm25 and hybrid retrievers (default: bm25.analyzer)")
    fusion_depth: int = Field(100, gt=0)
    store: StoreConfig = StoreConfig()
    store_sweep: dict[str, list[Any]] = Field(
        default_factory=dict, description="[store] knobs given as lists: each a dimension of the grid (STORE_KNOBS)")
    baseline: BaselineConfig | None = None
    answers: Literal["none", "extractive"] = Field(
        "none", description="shorthand for [stages.generate] generator = 'extractive': answer and score citations"
    )
    span_coverage: float = Field(0.5, gt=0, le=1, description="span recall: share of a gold span's characters that must be retrieved")
    answer_metrics: list[str] = Field(default_factory=lambda: ["string_presence", "rouge_l"])
    judge: JudgeConfig = Field(JudgeConfig(), description="judged metrics of the answers (faithfulness, ...): [judge] kind = ...")
    context_tokenizer: str = Field(
        "embedder", description='count context tokens with "embedder", "generator" (the default GGUF) or a GGUF path'
    )
    stages: dict[str, dict[str, Any]] = Field(default_factory=dict, description="stage kind -> settings; a list on a knob sweeps it")
    search: Literal["grid", "optuna"] = "grid"
    max_trials: int | None = Field(None, gt=0, description="optuna: trials to sample (default: a quarter of the grid)")
    seed: int = 0
    executor: Literal["local", "ray"] = Field(
        "local", description="local (this process) or ray (trials as Ray tasks; the workspace must be shared)")
    ray_address: str | None = Field(None, description="executor ray: the cluster's address (default: a local Ray instance)")
    race: Literal["auto", "on", "off"] = Field(
        "auto", description="race trials on growing question subsets, dropping those that cannot win (ragopt.eval.race); "
                            "auto: when some trial answers with an LLM")
    race_confidence: float = Field(0.95, gt=0, lt=1, description="race: how sure a drop must be (bootstrap interval)")
    race_schedule: list[float] = Field(default_factory=lambda: [0.1, 0.25, 0.5, 1.0],
                                       description="race: the share of questions answered by the end of each round")
    race_min_questions: int = Field(20, gt=0, description="race: questions a round answers at least (or all)")
    select_split: str | None = Field(None, description="select on this split ...")
    report_split: str | None = Field(None, description="... and report the selected trial on this one")
    holdout: float | None = Field(None, gt=0, lt=1, description="no splits: hold this share of queries out (seeded)")

    @model_validator(mode="before")
    @classmethod
    def _store_lists_are_dimensions(cls, data: Any) -> Any:
        """`[store] hnsw_ef = [32, 128]`: a list on a store knob sweeps it, as a list on a stage knob does."""
        store = data.get("store") if isinstance(data, dict) else None
        if not isinstance(store, dict) or not any(isinstance(v, list) for v in store.values()):
            return data
        lists = {k: v for k, v in store.items() if isinstance(v, list)}
        unknown = sorted(set(lists) - set(STORE_KNOBS))
        if unknown:
            raise ValueError(f"store.{unknown[0]} is not a knob a sweep varies; knobs: {', '.join(STORE_KNOBS)}")
        if any(not v for v in lists.values()):
            raise ValueError(f"store.{next(k for k, v in lists.items() if not v)}: an empty list sweeps nothing")
        return {**data, "store": {k: v for k, v in store.items() if k not in lists}, "store_sweep": lists}

    @field_validator("top_k")
    @classmethod
    def _positive_k(cls, v: list[int]) -> list[int]:
        if not v or any(k <= 0 for k in v):
            raise ValueError("top_k must be a non-empty list of positive integers")
        return sorted(set(v))

    @field_validator("embedders")
    @classmethod
    def _known_embedders(cls, v: list[str]) -> list[str]:
        for model in v:
            check_embedder_name(model)
        return v

    @field_validator("ray_address")
    @classmethod
    def _address_needs_ray(cls, v: str | None, info: Any) -> str | None:
        if v is not None and info.data.get("executor") != "ray":
            raise ValueError('a Ray address needs executor "ray" (--executor ray)')
        return v

    @field_validator("race_schedule")
    @classmethod
    def _race_schedule(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 < share <= 1 for share in v) or any(b <= a for a, b in zip(v, v[1:])) or v[-1] != 1:
            raise ValueError("the race schedule must be increasing shares in (0, 1] ending at 1 (every question), "
                             f"e.g. 0.1,0.25,0.5,1; got {','.join(f'{x:g}' for x in v) or 'nothing'}")
        return v

    @field_validator("alphas")
    @classmethod
    def _alpha_range(cls, v: list[float]) -> list[float]:
        if any(not 0 <= a <= 1 for a in v):
            raise ValueError("every alpha must lie in [0, 1]")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "SweepConfig":
        if any(o < 0 for o in self.chunk_overlaps):
            raise ValueError("chunk_overlaps must not be negative")
        for name in ("chunk_sizes", "chunk_overlaps", "retrievers", "fusions"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        check_chunker_knobs(self.chunkers, self.chunker)
        if (self.select_split is None) != (self.report_split is None):
            raise ValueError("select_split and report_split go together")
        if ("langchain" in self.retrievers) != (self.langchain is not None):
            raise ValueError('retriever "langchain" and a langchain target ("module:attribute") go together')
        if self.holdout is not None and self.select_split is not None:
            raise ValueError("holdout is for sets without splits: give either holdout or select_split/report_split")
        self.store_configs()  # every swept store value, with the others: named before any work
        self.embedder_configs()  # each swept model with the embedder's runtime
        return self

    def store_configs(self) -> list[StoreConfig | None]:
        """The stores the grid compares: None (the sweep's one `store`, left out of the plans) without [store]
        lists, else every combination of them over `store`."""
        if not self.store_sweep:
            return [None]
        base = self.store.model_dump()
        out: dict[str, StoreConfig] = {}
        for combo in itertools.product(*self.store_sweep.values()):
            values = {**base, **dict(zip(self.store_sweep, combo))}
            if values["engine"] == "exact":  # HNSW knobs mean nothing to exact search: one exact trial, not one per value
                values.update({k: StoreConfig.model_fields[k].default for k in STORE_KNOBS if k != "engine"})
            try:
                config = validate(StoreConfig, values, "store")
            except InputError as exc:  # one line naming the key and the swept value that failed
                key = "/".join(self.store_sweep) if exc.field == "(top level)" else exc.field
                raise ValueError(f"store.{key}: {exc.message}, got {values.get(key, combo)!r}") from None
            out.setdefault(config.fingerprint(), config)
        return list(out.values())

    @field_validator("stages")
    @classmethod
    def _known_stage_values(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for kind, values in v.items():
            try:
                validate_stage_values(kind, values, "stages")
            except InputError as exc:
                raise ValueError(f"stages.{kind}" + (f".{exc.field}" if exc.field else "") + f": {exc.message}") from None
        return v

    def stage_values(self) -> dict[str, dict[str, Any]]:
        """[stages] with the `answers` shorthand applied."""
        stages = {k: dict(v) for k, v in self.stages.items()}
        # context tokens: a fitted prompt
        stages.setdefault(kind_in_slot(PROMPT_SLOT), {}).setdefault("tokenizer", self.context_tokenizer)
        if self.answers != "none":
            stages.setdefault(kind_in_slot(GENERATE_SLOT), {}).setdefault("generator", self.answers)
        return stages

    def chunker_configs(self) -> list[ChunkerConfig]:
        return chunker_grid(self.chunk_sizes, self.chunk_overlaps, self.chunkers, self.chunker)

    def embedder_configs(self) -> list[EmbedderConfig]:
        """Each model of `embedders` with the sweep's embedder settings, each checked as a whole (onnx-int8 runs
        MiniLM only: a copy without the check would run e5 and drop the runtime silently)."""
        models = self.embedders or [self.embedder.model]
        return [EmbedderConfig.model_validate(self.embedder.model_dump() | {"model": m}) for m in models]

    def retrieval_variants(self, k: int) -> list[RetrievalConfig]:
        variants = []
        for retriever in self.retrievers:
            fusions = [FusionConfig()] if retriever != "hybrid" else [
                FusionConfig(method=f, alpha=a, depth=self.fusion_depth)
                for f in self.fusions
                for a in (self.alphas if f == "convex" else [0.5])
            ]
            target = self.langchain if retriever == "langchain" else None
            bm25s = self.bm25_configs() if retriever in ("bm25", "hybrid") else [self.bm25]
            variants += [RetrievalConfig(retriever=retriever, top_k=k, fusion=fu, bm25=bm25, langchain=target)
                         for fu in fusions for bm25 in bm25s]
        return variants

    def bm25_configs(self) -> list[BM25Config]:
        return [self.bm25.model_copy(update={"analyzer": a}) for a in self.analyzers] or [self.bm25]

    def stage_dimensions(self) -> dict[str, list[Any]]:
        """"kind.knob" -> values, for every knob given as a list (a dimension) in [stages]."""
        dims: dict[str, list[Any]] = {}
        for kind, values in self.stage_values().items():
            declared = knobs(spec_for(kind).config)
            for name, value in values.items():
                if name in declared and isinstance(value, list):
                    dims[f"{kind}.{name}"] = value
        return dims

    def plans(self) -> list[tuple[str, PlanConfig]]:
        """The full grid as (trial id, plan), grouped by embedder and chunker (so shared work stays warm). A knob
        its stage ignores under the other choices (StageSpec.ignores) is put back to its default: it makes no trial
        of its own."""
        dims = self.stage_dimensions()
        varying = [d for d, v in dims.items() if len(v) > 1]
        effective = (self._effective(dict(zip(dims, combo))) for combo in itertools.product(*dims.values()))
        choices = list({fingerprint(choice): choice for choice in effective}.values())  # equal choices: one trial
        stores = self.store_configs()
        out = []
        for embedder in self.embedder_configs():
            for chunker in self.chunker_configs():
                for store in stores:
                    for k in self.top_k:
                        for variant in self.retrieval_variants(k):
                            for choice in choices:
                                plan = self.plan(embedder, chunker, variant, choice).model_copy(update={"store": store})
                                out.append((self.trial_id(embedder, chunker, variant, choice, varying, store), plan))
        return out

    def _effective(self, choice: dict[str, Any]) -> dict[str, Any]:
        """`choice` ("kind.knob" -> value) with each knob its stage ignores under this choice set to its default."""
        stages = self.stage_values()
        out = dict(choice)
        for kind in dict.fromkeys(dim.split(".", 1)[0] for dim in choice):
            spec = spec_for(kind)
            if spec.ignores is None:
                continue
            chosen = {dim.split(".", 1)[1]: v for dim, v in choice.items() if dim.startswith(f"{kind}.")}
            config = validate(spec.config, {**stages[kind], **chosen}, f"stages.{kind}")
            out.update({f"{kind}.{name}": spec.config.model_fields[name].default
                        for name in spec.ignores(config) if f"{kind}.{name}" in out})
        return out

    def routes(self) -> bool:
        """Whether some trial routes each question to one of two backends (StageSpec.routing): then every answering
        trial reports its share of questions sent to the small one."""
        for kind, values in self.stage_values().items():
            spec = spec_for(kind)
            swept = {n: v for n, v in values.items() if n in knobs(spec.config) and isinstance(v, list)}
            for combo in itertools.product(*swept.values()) if spec.routing is not None else ():
                if spec.routing(validate(spec.config, {**values, **dict(zip(swept, combo))}, f"stages.{kind}")) == ROUTED:
                    return True
        return False

    def plan(self, embedder: EmbedderConfig, chunker: ChunkerConfig, variant: RetrievalConfig, choice: dict[str, Any]) -> PlanConfig:
        stages = self.stage_values()
        for dim, value in choice.items():
            kind, name = dim.split(".", 1)
            stages[kind][name] = value
        return PlanConfig(chunker=chunker, embedder=embedder, retrieval=variant, stages=stages)

    def trial_id(self, embedder: EmbedderConfig, chunker: ChunkerConfig, variant: RetrievalConfig,
                 choice: dict[str, Any], varying: list[str], store: StoreConfig | None = None) -> str:
        chunk = chunker_label(chunker, self.chunker)
        retr = variant.retriever
        if retr == "hybrid":
            retr += f"-{variant.fusion.method}" + (f"{variant.fusion.alpha:g}" if variant.fusion.method == "convex" else "")
        parts = [chunk, retr, f"k{variant.top_k}"]
        if len(self.bm25_configs()) > 1 and variant.retriever in ("bm25", "hybrid"):
            parts.insert(2, f"an-{variant.bm25.analyzer}")
        if len(self.embedder_configs()) > 1:
            parts.insert(0, "emb-" + embedder_label(embedder.model))
        parts += [f"{dim.replace('.', '-')}{_short(choice[dim])}" for dim in varying]
        if store is not None:
            used = ("engine",) if store.engine == "exact" else STORE_KNOBS  # exact search has no HNSW settings
            parts += [f"store-{name}{_short(getattr(store, name))}" for name, values in self.store_sweep.items()
                      if len(values) > 1 and name in used]
        return "_".join(parts)

    def cutoffs(self) -> list[int]:
        """Every K a metric is reported at: the top_k values, 10, and any K a gate names."""
        gate_ks = {int(k) for g in self.gates for k in re.findall(r"@(\d+)", g)}
        return sorted(set(self.top_k) | {10} | gate_ks)

    def races(self, plans: list[tuple[str, PlanConfig]]) -> bool:
        """Whether this sweep races its trials: asked to, or by default when some trial answers with an LLM.
        Asked to with nothing to race (no answers, or one trial) is an InputError naming `race`."""
        if self.race == "off":
            return False
        llm = any(plan.routing() not in (None, "small") for _, plan in plans)
        if self.race == "auto":
            return llm and len(plans) > 1
        if not self.answers_on() or len(plans) < 2:
            raise InputError("nothing to race: " + ("no trial answers questions (set answers or [stages.generate])"
                             if not self.answers_on() else "the sweep has one trial"), field="race")
        return True

    def answers_on(self) -> bool:
        return self.stage_values().get(kind_in_slot(GENERATE_SLOT), {}).get("generator", "none") not in ("none", ["none"])

    def metric_names(self, with_spans: bool, with_references: bool, with_live: bool = False) -> list[str]:
        names = [f"{m}@{k}" for m in RANK_METRICS for k in self.cutoffs()]
        names += [f"{m}@{k}" for m in ("span_recall", *CHAR_METRICS) for k in self.cutoffs()] if with_spans else []
        if self.answers_on():
            names += list(CITATION_METRICS) + (list(self.answer_metrics) if with_references else [])
            names += [ROUTED_SMALL_SHARE] if self.routes() else []
            names += list(LIVE_METRICS) if with_live else []
            if self.judge.on():
                names += [m for m in JUDGED_METRICS if m != "answer_correctness" or with_references]
        return names


def embedder_label(model: str) -> str:
    from pathlib import Path

    from ragopt.config import DEFAULT_EMBEDDER
    from ragopt.train.resolve import trained_label

    if model == DEFAULT_EMBEDDER:
        return "base"
    return trained_label(model) or re.sub(r"[^A-Za-z0-9.]+", "-", Path(model).name or model)


def _short(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(value))
