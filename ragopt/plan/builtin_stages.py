"""ragopt's own optional stages: each one module and one spec (ragopt.plan.spec), in BUILTIN_SPECS.

This module is imported the first time a plan looks up a stage kind (ragopt.plan.registry), never by
`ragopt --help`; builders import the heavier stage modules (models, indexes) only when a plan uses them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ragopt.config import StrictModel, knob, trained_split
from ragopt.plan.spec import BuildContext, StageSpec
from ragopt.stages.attribute import AttributeConfig
from ragopt.stages.compress import CompressConfig
from ragopt.stages.history import HistoryConfig
from ragopt.stages.prompt import PromptConfig
from ragopt.stages.rerank import RerankConfig
from ragopt.stages.rerank_maxsim import MaxSimConfig
from ragopt.stages.rewrite import RewriteConfig


class PromptStageConfig(PromptConfig):
    """The prompt as the generator receives it: the generator's own layout settings (PromptConfig, declared once),
    and how to count it. With a llama generator the generator's own prompt stage is used; otherwise this one lays
    the prompt out and counts it with `tokenizer`, so every trial's context tokens are those of a fitted prompt."""

    tokenizer: str = Field("embedder", description='"embedder", "generator" (the default GGUF) or a GGUF path')
    budget_tokens: int = Field(8192, gt=0, description="prompt token budget when no generator sets one")


class GenerateConfig(StrictModel):
    """Which generator answers: none (retrieval only), the extractive one, or a llama.cpp model."""

    generator: Literal["none", "extractive", "llama"] = knob("none", sweep=["extractive", "llama"])
    citations: Literal["free", "grammar"] = knob("free", sweep=["free", "grammar"],
                                                 description='llama: "grammar" forces every sentence to end with [n]')
    speculative: Literal["off", "prompt_lookup"] = knob("off", sweep=["off", "prompt_lookup"],
                                                        description='llama: "prompt_lookup" drafts from the prompt, verified greedily')
    draft_tokens: int = knob(3, sweep=[1, 3, 7], ge=1, le=32, description="llama, prompt_lookup: most draft tokens per step")
    llama: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 128},
                                  description="llama settings (ragopt.stages.generate_llama.GeneratorConfig: model, n_ctx, ...)")

    @model_validator(mode="after")
    def _llama_settings(self) -> "GenerateConfig":
        self.llama_config()  # a bad llama setting fails when the config is read, not at the first trial
        return self

    def llama_config(self) -> Any:
        from ragopt.stages.generate_llama import GeneratorConfig

        knobs = {"citations": self.citations, "speculative": self.speculative, "draft_tokens": self.draft_tokens}
        for key in knobs.keys() & self.llama.keys():  # one place for each: the sweepable knob
            raise ValueError(f"llama.{key} is set as stages.generate.{key}, not inside llama")
        return GeneratorConfig.model_validate({**self.llama, **knobs})


def _generator_kind(ctx: BuildContext) -> str:
    return ctx.plan.stages.get("generate", {}).get("generator", "none")


def _build_prompt(config: PromptStageConfig, ctx: BuildContext) -> Any:
    if _generator_kind(ctx) == "llama":
        return None  # the llama generator brings the prompt stage that matches its model
    from ragopt.stages.prompt import BuildPrompt, CountingRenderer
    from ragopt.tokencount import token_counter

    counter = ctx.resources.get(("token-counter", config.tokenizer, ctx.plan.embedder.fingerprint()),
                                lambda: token_counter(config.tokenizer, ctx.plan.embedder))
    layout = PromptConfig.model_validate(config.model_dump(include=set(PromptConfig.model_fields)))
    return BuildPrompt(CountingRenderer(counter), config.budget_tokens, layout)


class CiteConfig(AttributeConfig):
    """Post-hoc attribution after generation: on or off (a sweep dimension), then how."""

    enabled: bool = knob(True, sweep=[False, True], description="attribute each answer sentence to its best passage")


def _build_cite(config: CiteConfig, ctx: BuildContext) -> Any:
    if not config.enabled or _generator_kind(ctx) == "none":
        return None
    from ragopt.stages.attribute import AttributeCitations

    return AttributeCitations(config, analyzer=ctx.analyzer())


def _build_compress(config: Any, ctx: BuildContext) -> Any:
    from ragopt.stages.compress import CompressPassages

    return CompressPassages(config, embedder=ctx.embedder, analyzer=ctx.analyzer())


def _build_rerank(config: Any, ctx: BuildContext) -> Any:
    if config.depth == 0:
        return None
    from ragopt.stages.rerank import CrossEncoderRerank

    return CrossEncoderRerank(config, ctx.resources)


def _check_rerank(config: Any, plan: Any) -> None:
    from ragopt.stages.rerank import check_model_reference

    if config.model is not None and trained_split(config.model) is None:  # "trained:SPLIT": trained by the sweep
        check_model_reference(config.model, "model")


def _build_maxsim(config: Any, ctx: BuildContext) -> Any:
    if config.depth == 0:
        return None
    from ragopt.stages.rerank_maxsim import MaxSimRerank

    return MaxSimRerank(ctx.embedder, config)


def _build_generate(config: GenerateConfig, ctx: BuildContext) -> Any:
    if config.generator == "none":
        return None
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    if config.generator == "extractive":
        return ExtractiveGenerator(analyzer=ctx.analyzer())
    from ragopt.pipeline import Step
    from ragopt.stages.generate_llama import LlamaGenerator

    llama = LlamaGenerator(config.llama_config(), ctx.resources)
    return [llama.prompt_stage(), Step(llama, fallback=ExtractiveGenerator(analyzer=ctx.analyzer()))]


def _build_rewrite(config: Any, ctx: BuildContext) -> Any:
    """The rewrite stage before retrieval, or (mode "multi") one stage retrieving for every variant."""
    from ragopt.index import default_cache
    from ragopt.stages.multi_query import with_rewrite
    from ragopt.stages.rewrite import QueryRewrite

    cache = ctx.resources.get(("cache", str(ctx.workspace)), lambda: default_cache(ctx.workspace))
    return with_rewrite(QueryRewrite(config, cache=cache, resources=ctx.resources, analyzer=ctx.analyzer()), ctx.retrieval)


def _build_history(config: Any, ctx: BuildContext) -> Any:
    from ragopt.stages.history import SummarizeHistory

    return SummarizeHistory(config, resources=ctx.resources)


def _check_rewrite(config: Any, plan: Any) -> None:
    from ragopt.stages.rewrite import QueryRewrite

    QueryRewrite(config)  # reads the glossary, finds the model in llm mode


def _check_history(config: Any, plan: Any) -> None:
    from ragopt.stages.history import SummarizeHistory

    SummarizeHistory(config)  # compiles the redaction patterns, finds the model in llm mode


def _check_compress(config: Any, plan: Any) -> None:
    from ragopt.stages.compress import CompressPassages

    CompressPassages(config)  # a token budget below the instructions' size is refused here


def _check_generate(config: GenerateConfig, plan: Any) -> None:
    """A llama generator's model (a GGUF path, or the packaged default) must exist before any index is built."""
    if config.generator != "llama":
        return
    from ragopt.gguf_meta import resolve_model

    resolve_model(config.llama_config().model, field="llama.model")  # check_plans prefixes "stages.generate"


BUILTIN_SPECS = (
    StageSpec("rewrite", RewriteConfig, _build_rewrite, slot="rewrite", replaces_retrieval=True,
              check=_check_rewrite),
    StageSpec("history", HistoryConfig, _build_history, slot="history", check=_check_history),
    StageSpec("rerank", RerankConfig, _build_rerank, slot="rerank", check=_check_rerank,
              wants=lambda config: config.depth),
    StageSpec("rerank_maxsim", MaxSimConfig, _build_maxsim, slot="rerank", wants=lambda config: config.depth),
    StageSpec("compress", CompressConfig, _build_compress, slot="compress", check=_check_compress),
    StageSpec("prompt", PromptStageConfig, _build_prompt, slot="prompt"),
    StageSpec("generate", GenerateConfig, _build_generate, slot="generate", check=_check_generate),
    StageSpec("cite", CiteConfig, _build_cite, slot="cite"),
)
