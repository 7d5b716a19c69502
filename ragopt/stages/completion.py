"""The settings of a completion that every LLM generator sends, declared once: the in-process llama.cpp generator
(`GeneratorConfig`) and the OpenAI-compatible HTTP one (`HttpGeneratorConfig`) both extend `CompletionConfig`, so a
plan's generate settings mean the same, with the same defaults, whichever engine answers."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, model_validator

from ragopt.config import StrictModel
from ragopt.stages.prompt import PromptConfig
from ragopt.types import Sampling


class CompletionConfig(StrictModel):
    n_ctx: int = Field(2048, gt=0, description="context per request (per slot of a server; llama.cpp pads it up to a multiple of 256)")
    max_tokens: int = Field(128, gt=0, description="output budget; the prompt gets n_ctx - max_tokens (RAG answers from a few passages are short)")
    temperature: float = Field(0.0, ge=0, description="0 = greedy")
    seed: int = 0
    stop: tuple[str, ...] = ()
    prompt: PromptConfig = Field(PromptConfig(), description="the layout `prompt_stage()` builds")

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> "CompletionConfig":
        if self.max_tokens >= self.n_ctx:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be smaller than n_ctx ({self.n_ctx}): the prompt needs room")
        return self

    def for_request(self, sampling: Sampling | None) -> Self:
        """These settings with one request's options: its max_tokens lowers the output budget (never raises it past
        this config's), its temperature and seed replace these, its stop strings join these."""
        if sampling is None:
            return self
        update: dict[str, Any] = {"stop": tuple(dict.fromkeys((*self.stop, *sampling.stop)))}
        if sampling.max_tokens is not None:
            update["max_tokens"] = min(self.max_tokens, sampling.max_tokens)
        if sampling.temperature is not None:
            update["temperature"] = sampling.temperature
        if sampling.seed is not None:
            update["seed"] = sampling.seed
        return self.model_copy(update=update)

    @property
    def prompt_budget(self) -> int:
        """Tokens the prompt may take: the configured window minus the output budget."""
        return self.n_ctx - self.max_tokens
