"""The plan model: one configuration of the whole chain (chunker, embedder, retrieval, and one config per optional
stage kind), with the checks every client runs before any work starts."""

from __future__ import annotations

from typing import Any, Sequence

from pydantic import BaseModel, Field

from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig, StoreConfig, StrictModel, knobs, validate
from ragopt.errors import InputError
from ragopt.plan.registry import spec_for


# the store settings a sweep may vary, each a list under [store] (docs/vector-stores.md)
STORE_KNOBS = ("engine", "hnsw_m", "hnsw_ef_construct", "hnsw_ef", "quantization", "rescore", "oversampling", "exact")


class PlanConfig(StrictModel):
    """One configuration of the whole chain: what a sweep trial, `ragopt eval` and `ragopt ask` run."""

    chunker: ChunkerConfig = ChunkerConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    stages: dict[str, dict[str, Any]] = Field(default_factory=dict, description="stage kind -> its config values")
    store: StoreConfig | None = Field(None, description="the vector store a sweep measured this plan with; None: the "
                                                        "store the caller gives (flags, workspace default)")

    def stage_config(self, kind: str) -> BaseModel:
        spec = spec_for(kind)
        return validate(spec.config, self.stages.get(kind, {}), f"stages.{kind}")

    def candidate_depth(self) -> int:
        """How many hits retrieval must hand on: top_k, or more when a stage (a reranker) wants more."""
        wanted = [spec_for(k).wants(self.stage_config(k)) for k in self.stages if spec_for(k).wants is not None]
        return max([self.retrieval.top_k, *wanted])

    def generates(self) -> bool:
        """Whether some stage of this plan writes an answer (a generator that is not "none")."""
        return any(spec_for(k).answers is not None and spec_for(k).answers(self.stage_config(k)) for k in self.stages)

    def routing(self) -> str | None:
        """Which backend answers this plan's questions: "small", "default", ROUTED (per question) or None (no
        stage answers, or none says); see StageSpec.routing."""
        found = (spec_for(k).routing(self.stage_config(k)) for k in self.stages if spec_for(k).routing is not None)
        return next((r for r in found if r is not None), None)

    def params(self) -> dict[str, Any]:
        """The knobs of this plan as flat "kind.knob" -> value (results.json params, report labels)."""
        out: dict[str, Any] = {}
        for kind in sorted(self.stages):
            config = self.stage_config(kind)
            for name in knobs(type(config)):
                out[f"{kind}.{name}"] = getattr(config, name)
        if self.store is not None:
            out.update({f"store.{name}": getattr(self.store, name) for name in STORE_KNOBS})
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
    checks = [(None, base)] + [(name, {**base, name: c}) for name in swept for c in values[name]]
    for name, settings in checks:  # each swept value with the others' settings (rules across fields)
        try:
            validate(spec.config, settings, source)
        except InputError as exc:  # the error names its own key, and the swept value that failed
            got = settings.get(exc.field) if name is None else settings[name]
            raise InputError(f"{exc.message}, got {got!r}", path=exc.path, field=exc.field) from None


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
