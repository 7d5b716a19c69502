"""Per-request traces: one span per stage, and percentile summaries over many requests.

This is the only module that reads the clock for stages; the pipeline core calls it, stages never do.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from pydantic import BaseModel, Field

PERCENTILES = (50, 95, 99)
# Per-request generation measurements that summaries report as distributions of their own. Each key has
# exactly one definition; a generator that cannot measure one leaves it out (None), never substitutes another.
GENERATION_ATTRS: dict[str, str] = {
    "queue_ms": "wall-clock wait for the model (its turn-taking lock)",
    "prefill_ms": "llama.cpp's prompt-evaluation counter (t_p_eval), without queueing or sampling",
    "ttft_ms": "wall-clock from the request's arrival (before queueing) to the first generated token",
    "tpot_ms": "wall-clock from the first to the last generated token, over (tokens - 1)",
    "tokens_per_s": "1000 / tpot_ms",
    "reused_fraction": "share of prompt tokens whose KV was reused instead of evaluated",
}


def now_ms() -> float:
    return time.perf_counter() * 1000.0


class Usage(BaseModel):
    """Counters a stage reports about its own work; the pipeline moves them into the stage's span."""

    tokens_in: int = 0
    tokens_out: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    # Stage-specific measurements: ttft_ms, tpot_ms, queue_ms, reused_tokens, dropped passages...
    attrs: dict[str, Any] = Field(default_factory=dict)


class Span(BaseModel):
    name: str
    # what its stage is, in OpenInference's words (RETRIEVER, RERANKER, EMBEDDING, LLM; CHAIN for ragopt's own
    # steps): declared by the stage class as `span_kind`, so an exporter needs no table of stage names
    kind: str = "CHAIN"
    answered: bool = False  # its stage wrote the request's answer (what a judge's verdict is about)
    start_ms: float  # offset from the start of the request
    ms: float
    items_in: int = 0
    items_out: int = 0
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    skipped: bool = False


class Trace(BaseModel):
    request_id: str
    query_id: str = ""
    spans: list[Span] = Field(default_factory=list)
    total_ms: float = 0.0
    degraded: list[str] = Field(default_factory=list)  # visible reasons: "generate: timeout -> extractive"
    route: str | None = None  # which backend the request was routed to ("small", "default"); None: no routing

    def span(self, name: str) -> Span | None:
        return next((s for s in self.spans if s.name == name), None)

    def attr(self, key: str) -> Any:
        """The first span attribute named `key` (e.g. "ttft_ms"), or None."""
        for s in self.spans:
            if key in s.usage.attrs:
                return s.usage.attrs[key]
        return None

    @property
    def cache_hits(self) -> int:
        return sum(s.usage.cache_hits for s in self.spans)

    @property
    def tokens_in(self) -> int:
        return sum(s.usage.tokens_in for s in self.spans)

    @property
    def tokens_out(self) -> int:
        return sum(s.usage.tokens_out for s in self.spans)


def percentiles(values: Iterable[float]) -> dict[str, float]:
    """p50/p95/p99 (linear interpolation), mean and count; all NaN-free, empty input gives n=0."""
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        return {"n": 0}
    out: dict[str, float] = {f"p{p}": float(np.percentile(arr, p)) for p in PERCENTILES}
    out["mean"] = float(arr.mean())
    out["n"] = int(arr.size)
    return out


def summarize(traces: Iterable[Trace]) -> dict[str, dict[str, float]]:
    """Latency percentiles per stage and for the whole request, plus one distribution per key of
    `GENERATION_ATTRS` (queue, prefill, TTFT, TPOT...) over the requests where generation measured it.

    A generation key is pooled only within one stage: when two stages report it (an LLM rewrite and the
    generator, say), each gets its own "STAGE.key" entry instead of one mixed distribution."""
    per_stage: dict[str, list[float]] = {}
    totals: list[float] = []
    extra: dict[tuple[str, str], list[float]] = {}
    for trace in traces:
        totals.append(trace.total_ms)
        for s in trace.spans:
            if not s.skipped:
                per_stage.setdefault(s.name, []).append(s.ms)
            for key in GENERATION_ATTRS:
                if s.usage.attrs.get(key) is not None:
                    extra.setdefault((s.name, key), []).append(float(s.usage.attrs[key]))
    summary = {name: percentiles(v) for name, v in per_stage.items()}
    summary["total"] = percentiles(totals)
    stages_per_key: dict[str, int] = {}
    for _, key in extra:
        stages_per_key[key] = stages_per_key.get(key, 0) + 1
    for (stage, key), values in extra.items():
        summary[key if stages_per_key[key] == 1 else f"{stage}.{key}"] = percentiles(values)
    return summary


def write_jsonl(traces: Iterable[Trace], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for trace in traces:
            f.write(trace.model_dump_json() + "\n")


def read_jsonl(path: str | Path) -> list[Trace]:
    with open(path, encoding="utf-8") as f:
        return [Trace.model_validate(json.loads(line)) for line in f if line.strip()]
