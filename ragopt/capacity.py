"""KV-cache capacity arithmetic: bytes per token, per sequence, concurrent sequences, Little's law, replicas.

Pure arithmetic over a `ModelShape` (read from GGUF metadata by `ragopt.gguf_meta`, or given as flags).
The generator's admission control uses the same functions, so `ragopt capacity` and the refusal a request
gets are computed the same way.

    KV bytes per token = sum over layers of n_head_kv x (head_dim_k x bytes(K) + head_dim_v x bytes(V))
                       = n_layer x n_head_kv x head_dim x (bytes(K) + bytes(V))   when every layer is alike

GQA/MQA enter through n_head_kv (not n_head). Quantized cache types store blocks of 32 values: q8_0 is
34 bytes per 32 values (32 int8 plus one f16 scale), q4_0 18/32, and so on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ragopt.errors import AdmissionError, InputError

# bytes per stored element, by llama.cpp cache type name (`--cache-type-k/v`)
KV_DTYPE_BYTES: dict[str, float] = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_1": 24 / 32,
    "q5_0": 22 / 32,
    "q4_1": 20 / 32,
    "q4_0": 18 / 32,
    "iq4_nl": 18 / 32,
}

KiB = 1024
MiB = 1024**2
GiB = 1024**3


def dtype_bytes(dtype: str) -> float:
    try:
        return KV_DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise InputError(f"unknown KV cache type {dtype!r}; known: {', '.join(KV_DTYPE_BYTES)}", field="dtype") from None


@dataclass(frozen=True)
class ModelShape:
    """The numbers KV size depends on. `n_head_kv` may be per layer (some models vary it, 0 = no KV)."""

    n_layer: int
    n_head_kv: int | tuple[int, ...]
    head_dim: int  # key head size
    head_dim_v: int | None = None  # value head size when it differs from the key's
    n_head: int | None = None
    n_embd: int | None = None
    n_ctx_train: int | None = None
    weights_bytes: int | None = None  # size of the tensors; None when given as flags
    name: str = ""
    architecture: str = ""

    def __post_init__(self) -> None:
        if self.n_layer <= 0 or self.head_dim <= 0:
            raise InputError(f"layers and head_dim must be positive (got {self.n_layer}, {self.head_dim})")
        heads = self.kv_heads_per_layer
        if len(heads) != self.n_layer:
            raise InputError(f"{len(heads)} per-layer KV head counts for {self.n_layer} layers")
        if any(h < 0 for h in heads) or sum(heads) == 0:
            raise InputError(f"KV head counts must be >= 0 and not all 0 (got {self.n_head_kv})")

    @property
    def kv_heads_per_layer(self) -> tuple[int, ...]:
        if isinstance(self.n_head_kv, int):
            return (self.n_head_kv,) * self.n_layer
        return tuple(self.n_head_kv)

    @property
    def gqa_ratio(self) -> float | None:
        """Query heads per KV head (1 = MHA, n_head = MQA), when n_head is known."""
        if self.n_head is None:
            return None
        return self.n_head / max(self.kv_heads_per_layer)


def kv_bytes_per_token(shape: ModelShape, dtype_k: str = "f16", dtype_v: str | None = None) -> float:
    """Bytes of K and V cache one token occupies across all layers."""
    bk = dtype_bytes(dtype_k)
    bv = dtype_bytes(dtype_v or dtype_k)
    dv = shape.head_dim_v or shape.head_dim
    return float(sum(h * (shape.head_dim * bk + dv * bv) for h in shape.kv_heads_per_layer))


def kv_bytes(shape: ModelShape, tokens: int, dtype_k: str = "f16", dtype_v: str | None = None) -> float:
    """KV bytes for one sequence of `tokens` tokens (prompt + output)."""
    if tokens < 0:
        raise InputError(f"token count must be >= 0 (got {tokens})")
    return tokens * kv_bytes_per_token(shape, dtype_k, dtype_v)


def llama_cpp_n_ctx(n_ctx: int) -> int:
    """The context llama.cpp actually allocates: it pads n_ctx up to a multiple of 256."""
    return int(math.ceil(n_ctx / 256) * 256)


@dataclass(frozen=True)
class MemoryBudget:
    total_bytes: float
    weights_bytes: float = 0.0
    reserve_bytes: float = 0.0  # runtime: compute buffers, CUDA context, activations
    margin_fraction: float = 0.10  # of total, kept free for fragmentation and spikes

    @property
    def kv_bytes(self) -> float:
        """What is left for KV cache; may be negative (the model does not fit)."""
        return self.total_bytes - self.weights_bytes - self.reserve_bytes - self.margin_fraction * self.total_bytes


def max_concurrent_sequences(budget: MemoryBudget, per_sequence_bytes: float) -> int:
    if per_sequence_bytes <= 0:
        raise InputError("bytes per sequence must be positive")
    return max(0, int(budget.kv_bytes // per_sequence_bytes))


def littles_law_in_flight(arrival_rate_per_s: float, latency_s: float) -> float:
    """L = lambda x W: requests in flight on average at `arrival_rate_per_s` with mean latency `latency_s`."""
    if arrival_rate_per_s < 0 or latency_s < 0:
        raise InputError("arrival rate and latency must be >= 0")
    return arrival_rate_per_s * latency_s


def replicas_needed(in_flight: float, max_concurrent_per_replica: int) -> int | None:
    """Replicas to hold `in_flight` sequences at once; None when one replica cannot hold any."""
    if max_concurrent_per_replica <= 0:
        return None
    return max(1, math.ceil(in_flight / max_concurrent_per_replica)) if in_flight > 0 else 0


def admit(
    shape: ModelShape,
    prompt_tokens: int,
    max_tokens: int,
    budget_bytes: float,
    dtype_k: str = "f16",
    dtype_v: str | None = None,
) -> float:
    """Return the KV bytes the request needs, or raise AdmissionError when they exceed `budget_bytes`."""
    need_tokens = prompt_tokens + max_tokens
    need = kv_bytes(shape, need_tokens, dtype_k, dtype_v)
    if need > budget_bytes:
        raise AdmissionError(
            f"request needs {need_tokens} tokens of KV cache ({format_bytes(need)} = {prompt_tokens} prompt + "
            f"{max_tokens} output x {format_bytes(kv_bytes_per_token(shape, dtype_k, dtype_v))}/token), over the "
            f"KV budget of {format_bytes(budget_bytes)}; lower max_tokens, retrieve fewer passages or raise kv_budget_bytes"
        )
    return need


def format_bytes(n: float) -> str:
    """Binary units; whole numbers print bare ("128 KiB", "1 GiB"), others with two decimals ("45.50 MiB")."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.0f} {unit}" if float(value).is_integer() else f"{value:.2f} {unit}"
    return f"{n:.0f} B" if float(n).is_integer() else f"{n:.2f} B"


def parse_bytes(text: str | int | float) -> float:
    """'80GiB', '80 GB', '24g', '512MiB', 1e9 -> bytes. Decimal units (GB) are powers of 1000, binary (GiB) of 1024."""
    if isinstance(text, (int, float)):
        return float(text)
    s = text.strip().replace(" ", "").lower()
    units = {
        "tib": 1024**4, "gib": GiB, "mib": MiB, "kib": KiB,
        "tb": 1e12, "gb": 1e9, "mb": 1e6, "kb": 1e3,
        "t": 1024**4, "g": GiB, "m": MiB, "k": KiB, "b": 1.0,
    }
    for suffix, mult in units.items():
        if s.endswith(suffix):
            number = s[: -len(suffix)]
            break
    else:
        number, mult = s, 1.0
    try:
        return float(number) * mult
    except ValueError:
        raise InputError(f"cannot read {text!r} as a size (try 80GiB, 24GB, 512MiB)") from None


@dataclass(frozen=True)
class CapacityReport:
    shape: ModelShape
    dtype_k: str
    dtype_v: str
    seq_tokens: int
    bytes_per_token: float
    bytes_per_sequence: float
    budget: MemoryBudget | None = None
    max_sequences: int | None = None
    rate_per_s: float | None = None
    latency_s: float | None = None
    in_flight: float | None = None
    replicas: int | None = None

    def lines(self) -> list[str]:
        s = self.shape
        heads = s.kv_heads_per_layer
        head_desc = str(heads[0]) if len(set(heads)) == 1 else f"{min(heads)}-{max(heads)} (per layer)"
        out = []
        if s.name or s.architecture:
            out.append(f"model:            {s.name or '?'} ({s.architecture or '?'})")
        dims = f"layers {s.n_layer}, KV heads {head_desc}, head_dim {s.head_dim}"
        if s.head_dim_v and s.head_dim_v != s.head_dim:
            dims += f" (V {s.head_dim_v})"
        if s.n_head:
            dims += f", query heads {s.n_head}"
        out.append(f"shape:            {dims}")
        kv_type = self.dtype_k if self.dtype_k == self.dtype_v else f"K {self.dtype_k}, V {self.dtype_v}"
        out.append(f"KV cache type:    {kv_type}")
        out.append(f"KV per token:     {format_bytes(self.bytes_per_token)} ({self.bytes_per_token:,.0f} B)")
        out.append(
            f"KV per sequence:  {format_bytes(self.bytes_per_sequence)} at {self.seq_tokens} tokens "
            f"({self.bytes_per_sequence / MiB:.2f} MiB)"
        )
        if s.weights_bytes:
            out.append(f"weights:          {format_bytes(s.weights_bytes)}")
        if self.budget is not None:
            b = self.budget
            out.append(
                f"memory budget:    {format_bytes(b.total_bytes)} total - {format_bytes(b.weights_bytes)} weights - "
                f"{format_bytes(b.reserve_bytes)} reserve - {b.margin_fraction:.0%} margin = {format_bytes(max(b.kv_bytes, 0))} for KV"
            )
            out.append(f"max concurrent:   {self.max_sequences} sequences of {self.seq_tokens} tokens")
        if self.in_flight is not None:
            out.append(
                f"Little's law:     {self.rate_per_s:g} req/s x {self.latency_s:g} s = {self.in_flight:.2f} requests in flight"
            )
            if self.max_sequences is None:
                out.append("replicas needed:  give --memory to compute (concurrent sequences per replica)")
            elif self.replicas is None:
                out.append("replicas needed:  none can serve: a single sequence does not fit the budget")
            else:
                out.append(f"replicas needed:  {self.replicas} (each holding {self.max_sequences} sequences)")
        return out


def plan(
    shape: ModelShape,
    seq_tokens: int,
    dtype_k: str = "f16",
    dtype_v: str | None = None,
    budget: MemoryBudget | None = None,
    rate_per_s: float | None = None,
    latency_s: float | None = None,
) -> CapacityReport:
    dtype_v = dtype_v or dtype_k
    per_token = kv_bytes_per_token(shape, dtype_k, dtype_v)
    per_seq = per_token * seq_tokens
    max_seq = max_concurrent_sequences(budget, per_seq) if budget is not None else None
    in_flight = replicas = None
    if rate_per_s is not None and latency_s is not None:
        in_flight = littles_law_in_flight(rate_per_s, latency_s)
        if max_seq is not None:
            replicas = replicas_needed(in_flight, max_seq)
    return CapacityReport(
        shape=shape,
        dtype_k=dtype_k,
        dtype_v=dtype_v,
        seq_tokens=seq_tokens,
        bytes_per_token=per_token,
        bytes_per_sequence=per_seq,
        budget=budget,
        max_sequences=max_seq,
        rate_per_s=rate_per_s,
        latency_s=latency_s,
        in_flight=in_flight,
        replicas=replicas,
    )
