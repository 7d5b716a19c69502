"""The generate kind: which generator answers (none: retrieval only; the extractive one; a llama.cpp model), with
the llama settings of `GeneratorConfig` itself, declared there once (citations, speculative and draft_tokens are
its sweepable knobs). The llama generator brings the prompt stage that matches its model and falls back to the
extractive answer when it fails."""

from __future__ import annotations

from typing import Any, Literal

from ragopt.config import knob
from ragopt.stages.generate_llama import GeneratorConfig
from ragopt.stages.spec import BuildContext, ModelFile, Plan, StageSpec


class GenerateConfig(GeneratorConfig):
    """Which generator answers; the llama settings (model, n_ctx, max_tokens, ...) are GeneratorConfig's."""

    generator: Literal["none", "extractive", "llama"] = knob("none", sweep=["extractive", "llama"])

    def llama_config(self) -> GeneratorConfig:
        return GeneratorConfig.model_validate(self.model_dump(exclude={"generator"}))

    def brings_prompt(self) -> bool:
        """Whether the generator lays out its own prompt (fitted to its model), so no prompt stage is needed."""
        return self.generator == "llama"


def _build(config: GenerateConfig, ctx: BuildContext) -> Any:
    if config.generator == "none":
        return None
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    if config.generator == "extractive":
        return ExtractiveGenerator(analyzer=ctx.analyzer())
    from ragopt.pipeline import Step
    from ragopt.stages.generate_llama import LlamaGenerator

    llama = LlamaGenerator(config.llama_config(), ctx.resources)
    return [llama.prompt_stage(), Step(llama, fallback=ExtractiveGenerator(analyzer=ctx.analyzer()))]


def _check(config: GenerateConfig, plan: Plan) -> None:
    """A llama generator's model (a GGUF path, or the packaged default) must exist before any index is built."""
    if config.generator == "llama":
        from ragopt.gguf_meta import resolve_model

        resolve_model(config.model, field="model")  # check_plans prefixes "stages.generate"


def _models(config: GenerateConfig) -> dict[str, ModelFile]:
    return {"generator": config.model_file()} if config.generator == "llama" else {}


SPEC = StageSpec("generate", GenerateConfig, _build, slot="generate", check=_check, models=_models,
                 answers=lambda config: config.generator != "none")
