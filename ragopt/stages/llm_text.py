"""Short greedy LLM completions (a query rewrite, a history summary) through the generator's llama.cpp engine.

The engine is shared with `LlamaGenerator` when the configs match, so this helper follows the same rules:
it takes the engine's FIFO lock (bounded by a timeout), and it keeps the live KV cache tenant-isolated. The
system message is public (instructions only); the user message carries the tenant's text. When the live KV
belongs to another (tenant, scopes), it is cut back to the tokens that are public for both, and afterwards
the engine records this owner and this prompt's public prefix, so the next request knows what it may reuse.
"""

from __future__ import annotations

import codecs
import json
import time
from dataclasses import dataclass
from typing import Any, Sequence

from ragopt.backends.llama_decode import Decoder
from ragopt.errors import ContextOverflow, QueueTimeout
from ragopt.stages.generate_llama import Engine
from ragopt.stages.prompt_search import prefix_tokens

Owner = tuple[str | None, tuple[str, ...]]


@dataclass(frozen=True)
class Completion:
    text: str
    tokens_in: int  # prompt tokens
    tokens_out: int  # generated tokens (end-of-generation not counted)
    finish_reason: str  # "stop" (end of generation or a stop string) or "length"
    queue_ms: float  # time spent waiting for the engine's lock


def _render(engine: Engine, system: str, user: str) -> tuple[str, list[int]]:
    """The chat-template text and tokens of the two messages (the tokenizer is read-only: no lock needed)."""
    text = engine.renderer.render([{"role": "system", "content": system}, {"role": "user", "content": user}])
    return text, engine.renderer.tokenize(text)


def prompt_tokens(engine: Engine, system: str, user: str) -> int:
    """How many tokens the prompt `complete` would send has."""
    return len(_render(engine, system, user)[1])


def complete(
    engine: Engine,
    system: str,
    user: str,
    owner: Owner,
    *,
    max_tokens: int,
    stop: Sequence[str] = ("\n",),
    timeout_s: float | None = None,
    choices: Sequence[str] | None = None,
    grammar: str | None = None,
) -> Completion:
    """Greedy completion of a two-message chat (public `system`, private `user`) of at most `max_tokens`.

    `choices` constrains the output to exactly one of the given strings (a llama.cpp GBNF grammar), which turns
    the model into a classifier; `grammar` (GBNF text) forces any other structure, such as a JSON object. Raises ContextOverflow when the prompt and `max_tokens` do not fit the context,
    QueueTimeout when the lock is not granted within `timeout_s`."""
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    text, tokens = _render(engine, system, user)
    if len(tokens) + max_tokens > engine.n_ctx:
        raise ContextOverflow(f"prompt of {len(tokens)} tokens + {max_tokens} to generate exceed the context ({engine.n_ctx})")
    at = text.find(system)
    public = prefix_tokens(text, tokens, at + len(system), engine.renderer.tokenize) if at >= 0 else 0

    t_queue = time.perf_counter()
    if not engine.lock.acquire(timeout_s):
        raise QueueTimeout(f"model busy for {timeout_s:.1f} s")
    queue_ms = (time.perf_counter() - t_queue) * 1000
    try:
        if engine.owner is not None and engine.owner != owner:
            engine.truncate(min(engine.public_tokens, public))
        # from here on the live KV holds this owner's tokens, whatever happens below
        engine.owner = owner
        engine.public_tokens = public
        try:
            out, n_out, finish = _greedy(engine, tokens, max_tokens, tuple(stop), _grammar(choices, grammar))
        except BaseException:
            engine.truncate(0)
            raise
        engine.requests += 1
    finally:
        engine.lock.release()
    return Completion(text=out.strip(), tokens_in=len(tokens), tokens_out=n_out, finish_reason=finish, queue_ms=queue_ms)


def _grammar(choices: Sequence[str] | None, grammar: str | None = None) -> Any:
    if choices is None and grammar is None:
        return None
    if choices is not None and not choices:
        raise ValueError("choices must not be empty")
    from llama_cpp import LlamaGrammar

    if grammar is not None:
        return LlamaGrammar.from_string(grammar, verbose=False)
    return LlamaGrammar.from_string("root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in dict.fromkeys(choices or ())), verbose=False)


def _greedy(engine: Engine, tokens: list[int], max_tokens: int, stop: tuple[str, ...], grammar: Any) -> tuple[str, int, str]:
    """Greedy decoding through the engine's own prompt evaluation, so a completion does not depend on what the
    live KV held before (see `Engine.reusable_prefix`); a grammar goes through llama.cpp's sampler chain."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text, n_out, finish = "", 0, "length"
    logits = engine.eval_prompt(tokens, engine.reusable_prefix(tokens))
    sampler = None if grammar is None else engine.llm._init_sampler(temp=0.0, top_k=1, repeat_penalty=1.0, grammar=grammar)
    for token in Decoder(engine, tokens, sampler=sampler).tokens(logits):
        if engine.is_eog(token):
            finish = "stop"
            break
        n_out += 1
        text += decoder.decode(engine.piece(token))
        body = len(text) - len(text.lstrip())  # a stop string before any text (a leading newline) is skipped
        cut = min((i for i in (text.find(s, body) for s in stop if s) if i >= 0), default=-1)
        if cut >= 0:
            return text[:cut], n_out, "stop"
        if n_out >= max_tokens:
            break
    return text + decoder.decode(b"", final=True), n_out, finish
