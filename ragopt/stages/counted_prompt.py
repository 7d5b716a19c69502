"""The prompt kind: the prompt laid out by `PromptConfig` (ragopt.stages.prompt) and fitted to a token budget
counted with a chosen tokenizer, for a generator that brings no prompt stage of its own (the extractive one, or
none: a retrieval-only sweep still reports the context tokens of a fitted prompt)."""

from __future__ import annotations

from pydantic import Field

from ragopt.stages.prompt import BuildPrompt, CountingRenderer, PromptConfig
from ragopt.stages.spec import BuildContext, StageSpec


class PromptStageConfig(PromptConfig):
    """The prompt as the generator receives it: the generator's own layout settings (PromptConfig, declared once),
    and how to count it. With a generator that lays out its own prompt, that one is used; otherwise this one lays
    the prompt out and counts it with `tokenizer`, so every trial's context tokens are those of a fitted prompt."""

    tokenizer: str = Field("embedder", description='"embedder", "generator" (the default GGUF) or a GGUF path')
    budget_tokens: int = Field(8192, gt=0, description="prompt token budget when no generator sets one")


def _generator_brings_prompt(ctx: BuildContext) -> bool:
    return "generate" in ctx.plan.stages and ctx.plan.stage_config("generate").brings_prompt()


def _build(config: PromptStageConfig, ctx: BuildContext) -> BuildPrompt | None:
    if _generator_brings_prompt(ctx):
        return None
    from ragopt.tokencount import token_counter

    counter = ctx.resources.get(("token-counter", config.tokenizer, ctx.plan.embedder.fingerprint()),
                                lambda: token_counter(config.tokenizer, ctx.plan.embedder))
    layout = PromptConfig.model_validate(config.model_dump(include=set(PromptConfig.model_fields)))
    return BuildPrompt(CountingRenderer(counter), config.budget_tokens, layout)


SPEC = StageSpec("prompt", PromptStageConfig, _build, slot="prompt")
