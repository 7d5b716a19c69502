"""One stage plan for everyone: eval, sweep, ask and the LangChain adapter build pipelines here.

A plan is a pydantic `PlanConfig`: the chunker, embedder and retrieval settings plus one config per optional
stage kind ("rerank", "compress", ...). Each optional stage kind is a `StageSpec` in a registry: its config
model (whose `knob()` fields are what a sweep may vary), a slot that places it in the chain, and a builder.
A new stage is one module plus one `register_stage` call: the sweep's search space, results.json params,
report labels and the `--set KIND.KNOB=...` flag learn its knobs from the config model alone.

Chain order, by slot: rewrite -> retrieval (embed, vector, bm25, fuse) -> rerank -> compress -> history ->
prompt -> generate -> cite. Within a slot, stages run in registration order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pydantic import BaseModel, Field

from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig, StrictModel, knobs, validate
from ragopt.errors import InputError

if TYPE_CHECKING:
    from ragopt.index import Index
    from ragopt.pipeline import Stage, Step
    from ragopt.resources import Resources
    from ragopt.stages.embedding import Embedder

SLOTS = ("rewrite", "retrieval", "rerank", "compress", "history", "prompt", "generate", "cite")


@dataclass
class BuildContext:
    """What a stage builder may use: the open index and embedder of this plan, and the process's resources."""

    index: "Index | None"
    embedder: "Embedder"
    resources: "Resources"
    workspace: Path
    plan: "PlanConfig"
    retrieval: list[Any] = field(default_factory=list)  # the retrieval stages, for stages that wrap them


Builder = Callable[[Any, BuildContext], "Stage | Step | list[Stage | Step] | None"]


@dataclass(frozen=True)
class StageSpec:
    kind: str  # the key under [stages] in a sweep config, and the prefix of its knobs ("rerank.depth")
    config: type[StrictModel]
    build: Builder  # returns the stage(s), or None when this config switches the stage off
    slot: str
    replaces_retrieval: bool = False  # a builder that wraps ctx.retrieval (e.g. multi-query) stands in for it
    # checks a config against what it names (files, models, token budgets) before any work starts; InputError
    check: Callable[[Any, "PlanConfig"], None] | None = None
    # how many retrieved candidates this stage wants to see (a reranker's depth); the plan retrieves that many
    # and cuts back to its top_k after the stage
    wants: Callable[[Any], int] | None = None

    def __post_init__(self) -> None:
        if self.slot not in SLOTS:
            raise ValueError(f"slot must be one of {SLOTS}, got {self.slot!r}")


_SPECS: dict[str, StageSpec] = {}
_BUILTINS_LOADED = False


def register_stage(spec: StageSpec) -> StageSpec:
    """Make a stage kind available to plans and sweeps (re-registering a kind replaces it)."""
    _SPECS[spec.kind] = spec
    return spec


def unregister_stage(kind: str) -> None:
    _SPECS.pop(kind, None)


def stage_specs() -> dict[str, StageSpec]:
    """Every registered kind, ragopt's own stages included (their modules register on first use)."""
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        import ragopt.stages.registry  # noqa: F401  (registers the built-in optional stages)
    return dict(_SPECS)


def spec_for(kind: str, source: str = "stages") -> StageSpec:
    specs = stage_specs()
    if kind not in specs:
        raise InputError(f"unknown stage kind {kind!r}; known: {', '.join(sorted(specs)) or '(none)'}", field=source)
    return specs[kind]


class PlanConfig(StrictModel):
    """One configuration of the whole chain: what a sweep trial, `ragopt eval` and `ragopt ask` run."""

    chunker: ChunkerConfig = ChunkerConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    stages: dict[str, dict[str, Any]] = Field(default_factory=dict, description="stage kind -> its config values")

    def stage_config(self, kind: str) -> BaseModel:
        spec = spec_for(kind)
        return validate(spec.config, self.stages.get(kind, {}), f"stages.{kind}")

    def candidate_depth(self) -> int:
        """How many hits retrieval must hand on: top_k, or more when a stage (a reranker) wants more."""
        wanted = [spec_for(k).wants(self.stage_config(k)) for k in self.stages if spec_for(k).wants is not None]
        return max([self.retrieval.top_k, *wanted])

    def params(self) -> dict[str, Any]:
        """The knobs of this plan as flat "kind.knob" -> value (results.json params, report labels)."""
        out: dict[str, Any] = {}
        for kind in sorted(self.stages):
            config = self.stage_config(kind)
            for name in knobs(type(config)):
                out[f"{kind}.{name}"] = getattr(config, name)
        return out


def validate_stage_values(kind: str, values: dict[str, Any], source: str) -> None:
    """Before any work: the kind exists and every value fits its config (a list for a knob is a sweep
    dimension, each element checked)."""
    spec = spec_for(kind, source)
    declared = knobs(spec.config)
    for name in values:
        if name not in spec.config.model_fields:
            raise InputError(f"{kind} has no setting {name!r}; knobs: {', '.join(sorted(declared)) or '(none)'}",
                             path=source, field=f"stages.{kind}.{name}")
    swept = {name for name, value in values.items() if name in declared and isinstance(value, list)}
    base = {name: value[0] if name in swept and value else value for name, value in values.items()}
    for name, value in values.items():  # each value checked with the others' settings (rules across fields)
        for candidate in (value if name in swept else [value]):
            try:
                validate(spec.config, {**base, name: candidate}, source)
            except InputError as exc:
                raise InputError(f"{exc.message}, got {candidate!r}", path=exc.path, field=exc.field) from None


def check_plans(plans: Sequence["PlanConfig"]) -> None:
    """Before any work: each distinct stage config of these plans passes its kind's check (a glossary file
    that is empty, a model path that does not exist, a budget the instructions alone exceed...)."""
    seen: set[str] = set()
    for plan in plans:
        for kind in plan.stages:
            spec = spec_for(kind)
            config = plan.stage_config(kind)
            key = f"{kind}:{config.fingerprint()}:{plan.embedder.fingerprint()}"
            if spec.check is None or key in seen:
                continue
            seen.add(key)
            try:
                spec.check(config, plan)
            except InputError as exc:
                raise InputError(exc.message, path=exc.path, line=exc.line,
                                 field=f"stages.{kind}" + (f".{exc.field}" if exc.field else "")) from None


def build_steps(plan: PlanConfig, ctx: BuildContext, retrieval: list[Any]) -> list[Any]:
    """The pipeline's steps for `plan`: the retrieval stages given, and every configured optional stage in
    slot order (kinds a plan does not mention, or whose config switches them off, are left out). When a stage
    wanted more candidates than top_k (see `PlanConfig.candidate_depth`), the list is cut back to top_k after
    the rerank slot."""
    specs = stage_specs()
    unknown = sorted(set(plan.stages) - set(specs))
    if unknown:
        raise InputError(f"unknown stage kind {unknown[0]!r}", field="stages")
    ctx.retrieval = list(retrieval)
    by_slot: dict[str, list[Any]] = {slot: [] for slot in SLOTS}
    for kind in sorted(plan.stages, key=lambda k: (SLOTS.index(specs[k].slot), list(specs).index(k))):
        spec = specs[kind]
        built = spec.build(plan.stage_config(kind), ctx)
        if built is None:
            continue
        if spec.replaces_retrieval:
            ctx.retrieval = list(built) if isinstance(built, list) else [built]
        else:
            by_slot[spec.slot] += built if isinstance(built, list) else [built]
    by_slot["retrieval"] = ctx.retrieval
    if plan.candidate_depth() > plan.retrieval.top_k:
        from ragopt.stages.keep_top import KeepTop

        by_slot["rerank"].append(KeepTop(plan.retrieval.top_k))
    return [step for slot in SLOTS for step in by_slot[slot]]
