"""The one door: a plan in, a pipeline out. eval, sweep, ask, serve, search, training-data mining and the LangChain
adapters all build their pipelines here.

A plan is a pydantic `PlanConfig`: the chunker, embedder and retrieval settings plus one config per optional
stage kind. Each stage module declares its kind beside its config and its stage (a `StageSpec` named `SPEC`:
config model, whose `knob()` fields are what a sweep may vary, slot, builder, checks, the model files it
loads); the registry collects them (ragopt.plan.registry: ragopt's own stage modules, entry points of the
group "ragopt.stages", `register_stage`). A new stage is one module: the sweep's search space, results.json
params, report labels, `ragopt stages`, serve and provenance learn it from its spec.

Chain order, by slot: rewrite -> retrieval (embed, vector, bm25, fuse) -> rerank -> compress -> history ->
prompt -> generate -> cite. Within a slot, stages run in the order of their kind names.
"""

from ragopt.plan.assemble import build_steps, build_or_reuse_index, open_plan, pipeline_for, retrieval_stages, steps_by_slot
from ragopt.plan.model import PlanConfig, check_plans, validate_stage_values
from ragopt.plan.registry import kind_in_slot, register_stage, spec_for, stage_specs, unregister_stage
from ragopt.plan.saved import SavedPlan, check_saved, export_toml, load_plan, open_saved
from ragopt.stages.spec import SLOTS, BuildContext, ModelFile, StageSpec

__all__ = [
    "SLOTS", "BuildContext", "ModelFile", "PlanConfig", "StageSpec", "build_steps", "check_plans", "open_plan", "pipeline_for",
    "kind_in_slot", "register_stage", "retrieval_stages", "spec_for", "stage_specs", "unregister_stage", "validate_stage_values",
    "SavedPlan", "check_saved", "build_or_reuse_index", "steps_by_slot", "export_toml", "load_plan", "open_saved",
]
