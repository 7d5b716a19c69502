"""One loaded llama.cpp model (llama-cpp-python) and the machinery around its single live KV cache.

An `Engine` is the `Llama` object plus: a FIFO lock so requests take turns (the wait is what callers report
as queue time), who owns the tokens in the live KV (tenant isolation), low-level KV surgery (decode a batch,
truncate, save and restore one sequence), a bounded cache of saved hot-prefix states, and a `LlamaRenderer`
that renders chat messages with the GGUF's own template. Nothing here knows about requests, prompts or stages.

Answers must not depend on what the live KV held before. Without flash attention a batch of one token sums
differently from a batch of many (measured on SmolLM2: the last prompt token evaluated alone moved its logits by
up to 0.84, enough to flip a greedy near tie), and some ggml kernels split a batch by its size. So prompts are
always evaluated in chunks of `chunk` (n_batch) tokens aligned to position 0, exactly as a cold run evaluates
them, and only whole chunks that an earlier prompt evaluation computed are reused (`reusable_prefix`): never
positions written by single-token decode steps or verification batches, never the chunk that holds the prompt's
last token. Any decode that did not go through these methods (another caller of the same `Llama`) is noticed by
llama.cpp's own counters, and then nothing is reused. With flash attention (the default) and one thread, a decode
batch gives each of its tokens the logits it gets decoded alone (`batch_invariant`), which is what lets
speculative verification keep greedy answers.

The KV helpers use llama-cpp-python internals (`n_tokens`, `input_ids`, `_batch`, `_ctx`, `_requires_eval`),
checked against 0.3.36 (see pyproject.toml).
"""

from __future__ import annotations

import collections
import ctypes
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragopt import capacity
from ragopt.cache import CacheKey
from ragopt.errors import InputError

KvType = Literal["f16", "f32", "q8_0"]
_KV_TYPES = {"f32": 0, "f16": 1, "q8_0": 8}  # ggml type ids


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
class SavedPrefix:
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
    It is not a `ragopt.cache.Cache`: its values are live state of one loaded engine (meaningless in another
    process or after a reload), bounded by bytes, matched on the exact token sequence, and never computed by
    a get-or-compute (a prefix is saved as a side effect of evaluating it).
    """

    def __init__(self, max_entries: int, max_bytes: int):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: collections.OrderedDict[str, SavedPrefix] = collections.OrderedDict()
        self.bytes_used = 0
        self.cache_hits = 0
        self.cache_misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[SavedPrefix]:
        return list(self._items.values())

    def get(self, key: CacheKey, tokens: tuple[int, ...]) -> SavedPrefix | None:
        digest = key.digest()
        item = self._items.get(digest)
        if item is None or item.tokens != tokens:
            self.cache_misses += 1
            return None
        self._items.move_to_end(digest)
        self.cache_hits += 1
        return item

    def put(self, key: CacheKey, item: SavedPrefix) -> bool:
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
    kv_type: KvType = "f16"
    lock: FifoLock = field(default_factory=FifoLock)
    owner: tuple[str | None, tuple[str, ...]] | None = None  # (tenant, scopes) of the tokens in the live KV
    public_tokens: int = 0  # leading tokens of the live KV that hold no tenant data
    prefixes: PrefixStateCache | None = None
    requests: int = 0
    prompt_end: int = 0  # leading live-KV positions written by aligned prompt evaluation (see the module doc)
    _evals_seen: tuple[int, int] = (0, 0)  # llama.cpp's (n_p_eval, n_eval) after this engine's last decode

    @property
    def n_ctx(self) -> int:
        return int(self.llm.n_ctx())

    @property
    def chunk(self) -> int:
        """Prompt evaluation batch: n_batch (llama-cpp-python caps it at n_ctx; n_ubatch is the same)."""
        return int(self.llm.n_batch)

    @property
    def n_tokens(self) -> int:
        return int(self.llm.n_tokens)

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

    def live_prefix(self, tokens: list[int]) -> int:
        """How many leading `tokens` the live KV already holds."""
        return int(self.llm.longest_token_prefix(self.llm._input_ids.tolist(), tokens))

    def reusable_prefix(self, tokens: list[int]) -> int:
        """Leading `tokens` whose live KV a cold run would compute bit for bit: whole `chunk`s that an earlier
        prompt evaluation wrote, short of the chunk holding the last token (evaluated again for its logits)."""
        self._notice_foreign_decodes()
        common = min(self.live_prefix(tokens), self.prompt_end)
        return min(common // self.chunk, (len(tokens) - 1) // self.chunk) * self.chunk

    # --- live KV manipulation (call only while holding the lock) ---

    def decode(self, tokens: list[int], *, all_logits: bool = False) -> np.ndarray:
        """Evaluate `tokens` in one batch after the live KV's n_tokens. Returns the logits of the last token
        (one row) or, with all_logits, of every token; the rows are valid until the next decode."""
        import llama_cpp

        llm = self.llm
        n_past = llm.n_tokens
        llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
        llm._batch.set_batch(batch=tokens, n_past=n_past, logits_all=all_logits)
        llm._ctx.decode(llm._batch)
        llm.input_ids[n_past : n_past + len(tokens)] = tokens
        llm.n_tokens = n_past + len(tokens)
        llm._requires_eval = False
        rows = len(tokens) if all_logits else 1
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(llm.ctx), shape=(rows, llm.n_vocab()))
        self._evals_seen = self._evals()  # after llama_get_logits: it waits for the batch, then counts it
        return logits

    def eval_prompt(self, tokens: list[int], start: int) -> np.ndarray:
        """Evaluate tokens[start:] (start a multiple of `chunk`, the live KV holding tokens[:start]) in the
        chunks a cold run uses; the last token's logits (valid until the next decode)."""
        if start % self.chunk or start >= len(tokens):
            raise ValueError(f"prompt evaluation must start at a chunk boundary before the end, got {start}")
        self.truncate(start)
        logits = None
        for i in range(start, len(tokens), self.chunk):
            logits = self.decode(tokens[i : i + self.chunk])
        self.prompt_end = len(tokens)
        return logits[0]

    def truncate(self, n: int) -> None:
        """Keep only the first n tokens of the live KV."""
        llm = self.llm
        self.prompt_end = min(self.prompt_end, max(n, 0))
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

    def restore_sequence(self, saved: SavedPrefix) -> bool:
        """Put a saved prefix's KV back; it was written by aligned prompt evaluation, so it counts as such."""
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
        self.prompt_end = n
        return True

    def close(self) -> None:
        """Free the model once the request holding it (if any) is done; `Resources.close()` calls this."""
        self.lock.acquire()
        try:
            self.llm.close()
        finally:
            self.lock.release()

    def reset_counters(self) -> None:
        """Zero llama.cpp's per-request counters (prompt and decode tokens and ms, see `counters`)."""
        import llama_cpp

        self._notice_foreign_decodes()
        llama_cpp.llama_perf_context_reset(self.llm.ctx)
        self._evals_seen = self._evals()

    def counters(self) -> Any:
        """llama.cpp's counters since `reset_counters`: n_p_eval / t_p_eval_ms (batches of more than one
        token), n_eval / t_eval_ms (single tokens)."""
        import llama_cpp

        return llama_cpp.llama_perf_context(self.llm.ctx)

    def _notice_foreign_decodes(self) -> None:
        if self._evals() != self._evals_seen:  # someone decoded on this Llama behind the engine's back
            self.prompt_end = 0

    def _evals(self) -> tuple[int, int]:
        import llama_cpp

        perf = llama_cpp.llama_perf_context(self.llm.ctx)
        return int(perf.n_p_eval), int(perf.n_eval)


def batch_invariant(flash_attn: bool, n_threads: int) -> bool:
    """Whether a decode batch gives each token the logits it gets decoded alone, in this llama.cpp (0.3.36, CPU).

    Measured on SmolLM2 (Q4_1, Q4_0, IQ4_NL, Q8_0 weights, the default LLAMAFILE build): with flash attention on
    one thread, batches of 2, 3, 4, 5, 8 and 9 tokens after a 751-token prompt gave bit-identical logits; without it they were
    up to 0.63 apart. Flash attention computes each query row on its own, except that a lone token over 512 or more
    cached positions is split across threads and the parts summed: with more than one thread that sum differs."""
    return flash_attn and n_threads == 1


def gpu_layers(requested: int | None) -> int:
    """Layers to offload: `requested`, or with None every layer when this llama.cpp build can offload, else 0."""
    if requested is not None:
        return requested
    import llama_cpp

    return -1 if llama_cpp.llama_supports_gpu_offload() else 0


def load_engine(path: Path, *, n_ctx: int, n_batch: int, n_threads: int, kv_type: KvType, seed: int = 0,
                n_gpu_layers: int = 0, flash_attn: bool = True) -> Engine:
    """Load a GGUF with llama.cpp; configuration problems are `InputError`s naming the file."""
    from ragopt.gguf_meta import model_fingerprint, model_shape

    try:
        from llama_cpp import Llama
    except ImportError:
        raise InputError("llama-cpp-python is not installed: pip install 'ragopt[llm]'") from None
    shape = model_shape(path)
    if kv_type == "q8_0" and (shape.head_dim % 32 or (shape.head_dim_v or shape.head_dim) % 32):
        raise InputError(f"kv_type q8_0 needs a head size divisible by 32; this model's is {shape.head_dim}", path=path)
    kv = _KV_TYPES[kv_type]
    try:
        llm = Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=n_batch,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            seed=seed,
            type_k=kv,
            type_v=kv,
            flash_attn=flash_attn or kv_type == "q8_0",  # llama.cpp needs flash attention for a quantized V cache
            n_gpu_layers=n_gpu_layers,
            verbose=False,
        )
    except ValueError as exc:
        raise InputError(f"llama.cpp could not load the model: {exc}", path=path) from None
    return Engine(
        path=path,
        llm=llm,
        renderer=LlamaRenderer(llm),
        shape=shape,
        model_fingerprint=model_fingerprint(path),
        kv_type=kv_type,
    )
