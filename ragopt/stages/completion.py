"""The settings of a completion that every LLM generator sends, declared once: the in-process llama.cpp generator
(`GeneratorConfig`) and the OpenAI-compatible HTTP one (`HttpGeneratorConfig`) both extend `CompletionConfig`, so a
plan's generate settings mean the same, with the same defaults, whichever engine answers."""

from __future__ import annotations

from pydantic import Field, model_validator

from ragopt.config import StrictModel
from ragopt.stages.prompt import PromptConfig


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

    @property
    def prompt_budget(self) -> int:
        """Tokens the prompt may take: the configured window minus the output budget."""
        return self.n_ctx - self.max_tokens
