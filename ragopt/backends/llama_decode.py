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

Sampling (temperature > 0, a grammar, a penalty or a logit bias) goes through a llama.cpp sampler chain
(`sampler_chain`), one token per step, without speculation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragopt.backends.llama_engine import Engine
from ragopt.backends.prompt_lookup import PromptLookup


@dataclass(frozen=True)
class SamplerSettings:
    """What the sampler chain is built from (a trace records it as it was given to llama.cpp)."""

    temperature: float
    seed: int
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias)
    penalty_last_n: int = 64  # llama-cpp-python's last_n_tokens_size

    def traced(self, greedy: bool) -> dict[str, Any]:
        """What a trace shows of the sampler: greedy, or every setting the chain was built with."""
        if greedy:
            return {"greedy": True}
        return {"greedy": False, **{k: v for k, v in vars(self).items() if k != "logit_bias"},
                "logit_bias": [list(pair) for pair in self.logit_bias]}

    @property
    def greedy(self) -> bool:
        """Plain argmax of the raw logits: what the chain would pick, without building it."""
        return (self.temperature == 0 and self.repeat_penalty == 1.0 and not self.frequency_penalty
                and not self.presence_penalty and not self.logit_bias)


def sampler_chain(engine: Engine, settings: SamplerSettings, grammar: Any = None) -> Any:
    """llama.cpp's sampler chain in the order llama-cpp-python's `Llama._init_sampler` builds it (penalties, grammar,
    then greedy, or top-k, typical, top-p, min-p, temperature and a seeded draw), with llama.cpp's own logit-bias
    sampler first (llama-cpp-python offers a Python logits processor for it, which it marks "probably broken")."""
    import llama_cpp
    from llama_cpp._internals import LlamaSampler

    s = settings
    chain = LlamaSampler()
    n_vocab = engine.llm.n_vocab()
    if s.logit_bias:
        biases = (llama_cpp.llama_logit_bias * len(s.logit_bias))(*[llama_cpp.llama_logit_bias(t, b) for t, b in s.logit_bias])
        llama_cpp.llama_sampler_chain_add(chain.sampler, llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(s.logit_bias), biases))
    chain.add_penalties(n_vocab=n_vocab, penalty_last_n=s.penalty_last_n, penalty_repeat=s.repeat_penalty,
                        penalty_freq=s.frequency_penalty, penalty_present=s.presence_penalty)
    if grammar is not None:
        chain.add_grammar(engine.llm._model, grammar)
    if s.temperature == 0:
        chain.add_greedy()
        return chain
    chain.add_top_k(s.top_k)
    chain.add_typical(1.0, 1)
    chain.add_top_p(s.top_p, 1)
    chain.add_min_p(s.min_p, 1)
    chain.add_temp(s.temperature)
    chain.add_dist(s.seed)
    return chain


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
