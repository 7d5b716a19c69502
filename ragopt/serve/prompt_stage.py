"""The prompt stage the HTTP generator and the service put before generation.

`ragopt.stages.prompt.BuildPrompt` is that stage (branch `gen`); until it is merged here this module
carries a copy with the same name, fields and trace attributes. After the merge this file is just the
import below (delete the fallback).
"""

from __future__ import annotations

try:
    from ragopt.stages.prompt import BuildPrompt  # noqa: F401
except ImportError:  # pre-merge copy of ragopt.stages.prompt.BuildPrompt
    from ragopt.errors import InputError
    from ragopt.pipeline import RequestState
    from ragopt.stages.prompt import PromptConfig, Renderer, fit_prompt, prompt_parts

    class BuildPrompt:  # type: ignore[no-redef]
        """Lays out and fits the prompt into `budget_tokens`; writes a FittedPrompt to `state.prompt`."""

        reads = ("query", "hits")
        writes = ("prompt",)

        def __init__(self, renderer: Renderer, budget_tokens: int, config: PromptConfig | None = None, name: str = "prompt"):
            if budget_tokens <= 0:
                raise InputError(f"no room for a prompt: the token budget is {budget_tokens} (context minus max_tokens)")
            self.renderer = renderer
            self.budget_tokens = budget_tokens
            self.config = config if config is not None else PromptConfig()
            self.name = name

        def run(self, state: RequestState) -> RequestState:
            fitted = fit_prompt(prompt_parts(state.query, state.hits, self.config), self.renderer, self.budget_tokens)
            state.prompt = fitted
            state.usage.attrs.update(
                {
                    "prompt_tokens": fitted.n_tokens,
                    "dropped_passages": fitted.dropped_passages,
                    "trimmed_history_turns": fitted.trimmed_history_turns,
                    "question_truncated": fitted.question_truncated,
                    "stable_prefix_tokens": fitted.stable_prefix_tokens,
                    "passages": [p.chunk_id for p in fitted.passages],
                }
            )
            return state
