"""Traces: percentiles against numpy and by hand, per-stage summaries, JSON lines round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragopt.trace import Span, Trace, Usage, percentiles, read_jsonl, summarize, write_jsonl


def test_percentiles_by_hand() -> None:
    p = percentiles(range(1, 101))
    assert p["p50"] == pytest.approx(50.5)
    assert p["p95"] == pytest.approx(95.05)
    assert p["p99"] == pytest.approx(99.01)
    assert p["mean"] == pytest.approx(50.5) and p["n"] == 100
    assert percentiles([7.0]) == {"p50": 7.0, "p95": 7.0, "p99": 7.0, "mean": 7.0, "n": 1}
    assert percentiles([]) == {"n": 0}


def test_percentiles_match_numpy_on_skewed_latencies() -> None:
    values = np.random.default_rng(0).lognormal(mean=2.0, sigma=1.0, size=1001)
    p = percentiles(values.tolist())
    for q in (50, 95, 99):
        assert p[f"p{q}"] == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    assert p["p50"] < p["p95"] < p["p99"]


def _trace(i: int, retrieve_ms: float, generate_ms: float | None) -> Trace:
    spans = [Span(name="retrieve", start_ms=0.0, ms=retrieve_ms, items_in=0, items_out=5,
                  usage=Usage(cache_hits=1, cache_misses=2, tokens_in=3))]
    if generate_ms is None:
        spans.append(Span(name="generate", start_ms=retrieve_ms, ms=0.0, skipped=True, error="deadline"))
    else:
        spans.append(Span(name="generate", start_ms=retrieve_ms, ms=generate_ms, items_in=5, items_out=5,
                          usage=Usage(tokens_out=7, attrs={"ttft_ms": generate_ms / 4})))
    return Trace(request_id=f"r{i}", query_id=f"q{i}", spans=spans, total_ms=retrieve_ms + (generate_ms or 0.0),
                 degraded=[] if generate_ms is not None else ["generate: skipped, deadline passed"])


def test_summarize_per_stage_skips_skipped_spans() -> None:
    traces = [_trace(i, float(i), float(10 * i) if i % 5 else None) for i in range(1, 21)]
    summary = summarize(traces)
    assert summary["retrieve"]["n"] == 20
    assert summary["retrieve"]["p50"] == pytest.approx(np.percentile(np.arange(1, 21), 50))
    generated = [10.0 * i for i in range(1, 21) if i % 5]
    assert summary["generate"]["n"] == len(generated) == 16  # the 4 skipped spans are left out
    assert summary["generate"]["p95"] == pytest.approx(np.percentile(generated, 95))
    assert summary["ttft_ms"]["p50"] == pytest.approx(np.percentile([g / 4 for g in generated], 50))
    assert summary["total"]["n"] == 20
    assert summary["total"]["p99"] == pytest.approx(np.percentile([t.total_ms for t in traces], 99))


def test_jsonl_round_trip(tmp_path: Path) -> None:
    traces = [_trace(i, 1.5 * i, 3.25 * i if i != 2 else None) for i in range(1, 4)]
    path = tmp_path / "traces.jsonl"
    write_jsonl(traces, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and all(line.startswith("{") for line in lines)
    back = read_jsonl(path)
    assert back == traces
    assert back[1].degraded == ["generate: skipped, deadline passed"] and back[1].spans[1].skipped
    assert back[0].attr("ttft_ms") == pytest.approx(3.25 / 4)
    assert back[0].cache_hits == 1 and back[0].tokens_in == 3 and back[0].tokens_out == 7
    assert back[0].span("generate") is not None and back[0].span("nope") is None
