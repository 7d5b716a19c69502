"""The one door: a plan in, a pipeline out. eval, sweep, ask, serve, search, training-data mining and the LangChain
adapters all build their pipelines here.

A plan is a pydantic `PlanConfig`: the chunker, embedder and retrieval settings plus one config per optional
stage kind ("rerank", "compress", ...). Each optional stage kind is a `StageSpec` in a registry: its config
model (whose `knob()` fields are what a sweep may vary), a slot that places it in the chain, and a builder.
A new stage is one module plus one `register_stage` call: the sweep's search space, results.json params,
report labels and the `--set KIND.KNOB=...` flag learn its knobs from the config model alone.

Chain order, by slot: rewrite -> retrieval (embed, vector, bm25, fuse) -> rerank -> compress -> history ->
prompt -> generate -> cite. Within a slot, stages run in registration order.
"""

from ragopt.plan.assemble import build_steps, build_or_reuse_index, open_plan, pipeline_for, retrieval_stages, steps_by_slot
from ragopt.plan.model import PlanConfig, check_plans, validate_stage_values
from ragopt.plan.registry import register_stage, spec_for, stage_specs, unregister_stage
from ragopt.plan.saved import SavedPlan, check_saved, export_toml, load_plan, open_saved
from ragopt.plan.spec import SLOTS, BuildContext, StageSpec

__all__ = [
    "SLOTS", "BuildContext", "PlanConfig", "StageSpec", "build_steps", "check_plans", "open_plan", "pipeline_for",
    "register_stage", "retrieval_stages", "spec_for", "stage_specs", "unregister_stage", "validate_stage_values",
    "SavedPlan", "check_saved", "build_or_reuse_index", "steps_by_slot", "export_toml", "load_plan", "open_saved",
]
