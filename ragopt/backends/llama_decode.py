"""The next tokens after a prompt on an `Engine`'s live KV: greedy or sampled, optionally with prompt-lookup
speculative decoding.

Speculation (greedy only): a draft of up to `draft_tokens` tokens comes from `PromptLookup` (the tokens that
followed the latest earlier occurrence of the last n-gram, in the prompt or the answer so far). The last
token and the draft are evaluated in one batch; the draft is accepted as far as it equals the model's own
greedy choice (the argmax of each row), the model's choice after the accepted part is the bonus token, and
the rejected drafts' KV is removed. With flash attention on one thread (`batch_invariant`) a batch gives its
tokens the logits they get one by one, so the answer is plain greedy decoding's, token for token; otherwise a
near tie can go the other way, and `margins` records each chosen token's top-2 logit gap so such a step can
be seen.

Sampling (temperature > 0, a grammar or a repeat penalty) goes through llama-cpp-python's sampler chain, as
`Llama.generate` does, one token per step, without speculation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragopt.backends.llama_engine import Engine
from ragopt.backends.prompt_lookup import PromptLookup


@dataclass
class DecodeCounts:
    drafted: int = 0  # draft tokens sent for verification
    accepted: int = 0  # of those, the ones equal to the model's greedy choice
    verify_batches: int = 0  # decode calls that carried a draft
    steps: int = 0  # decode calls after the prompt (single tokens and verification batches)


def top2_gap(row: np.ndarray) -> float:
    """Logit of the best token minus that of the second best."""
    two = np.partition(row, -2)[-2:]
    return float(two[1] - two[0])


class Decoder:
    """`Decoder(engine, prompt).tokens(last_logits)` yields tokens until the caller stops reading; the live KV
    then holds the prompt and (at least) every yielded token but the last."""

    def __init__(self, engine: Engine, prompt: list[int], *, sampler: Any = None, draft_tokens: int = 0,
                 margins: list[float] | None = None):
        if sampler is not None and draft_tokens:
            raise ValueError("speculative decoding verifies greedy choices: it takes no sampler")
        self.engine = engine
        self.sampler = sampler
        self.draft_tokens = draft_tokens
        # a match of one token is weak evidence: drafting from it mostly wastes a verification batch
        self.lookup = PromptLookup(prompt, max_ngram=3, min_ngram=2) if draft_tokens > 0 else None
        self.margins = margins
        self.counts = DecodeCounts()

    def tokens(self, last_logits: np.ndarray) -> Iterator[int]:
        """`last_logits`: the prompt's last row, as `Engine.eval_prompt` returns it."""
        token = self._choose(last_logits)
        while True:
            yield token
            draft: list[int] = []
            if self.lookup is not None:
                self.lookup.append(token)
                room = self.engine.n_ctx - self.engine.n_tokens - 1  # the batch must fit the context
                draft = self.lookup.draft(min(self.draft_tokens, room))
            rows = self._step([token, *draft])
            accepted = 0
            while accepted < len(draft) and int(np.argmax(rows[accepted])) == draft[accepted]:
                accepted += 1
            if draft:
                self.counts.verify_batches += 1
                self.counts.drafted += len(draft)
                self.counts.accepted += accepted
                if accepted < len(draft):  # the rejected drafts' KV goes
                    self.engine.truncate(self.engine.n_tokens - (len(draft) - accepted))
            for i in range(accepted):
                self._note_margin(rows[i])
                yield draft[i]
                self.lookup.append(draft[i])  # type: ignore[union-attr]  # drafts exist only with a lookup
            token = self._choose(rows[accepted])

    def _step(self, batch: list[int]) -> np.ndarray:
        self.counts.steps += 1
        return self.engine.decode(batch, all_logits=len(batch) > 1)

    def _choose(self, row: np.ndarray) -> int:
        if self.sampler is not None:
            return int(self.sampler.sample(self.engine.llm._ctx, -1))  # reads and accepts the last logits
        self._note_margin(row)
        return int(np.argmax(row))

    def _note_margin(self, row: np.ndarray) -> None:
        if self.margins is not None:
            self.margins.append(top2_gap(row))
