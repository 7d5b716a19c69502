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
# Per-request generation measurements that summaries report as distributions of their own.
GENERATION_ATTRS = ("ttft_ms", "tpot_ms", "queue_ms", "reused_fraction", "tokens_per_s")


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
    """Latency percentiles per stage and for the whole request, plus TTFT/TPOT where generation ran."""
    per_stage: dict[str, list[float]] = {}
    totals: list[float] = []
    extra: dict[str, list[float]] = {}
    for trace in traces:
        totals.append(trace.total_ms)
        for s in trace.spans:
            if not s.skipped:
                per_stage.setdefault(s.name, []).append(s.ms)
            for key in GENERATION_ATTRS:
                if s.usage.attrs.get(key) is not None:
                    extra.setdefault(key, []).append(float(s.usage.attrs[key]))
    summary = {name: percentiles(v) for name, v in per_stage.items()}
    summary["total"] = percentiles(totals)
    summary.update({name: percentiles(v) for name, v in extra.items()})
    return summary


def write_jsonl(traces: Iterable[Trace], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for trace in traces:
            f.write(trace.model_dump_json() + "\n")


def read_jsonl(path: str | Path) -> list[Trace]:
    with open(path, encoding="utf-8") as f:
        return [Trace.model_validate(json.loads(line)) for line in f if line.strip()]
