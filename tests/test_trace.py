"""Traces: percentiles and per-stage summaries against figures worked out by hand, JSON lines round trip."""

from __future__ import annotations

from pathlib import Path

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


def test_percentiles_by_hand_on_skewed_latencies() -> None:
    # linear interpolation between order statistics: position q/100 * (n - 1) in the sorted values
    p = percentiles([100.0, 2.0, 4.0, 1.0, 3.0])
    assert p["p50"] == pytest.approx(3.0)  # position 2.0
    assert p["p95"] == pytest.approx(4.0 + 0.8 * (100.0 - 4.0))  # position 3.8 = 80.8
    assert p["p99"] == pytest.approx(4.0 + 0.96 * (100.0 - 4.0))  # position 3.96 = 96.16
    assert p["mean"] == pytest.approx(22.0) and p["n"] == 5


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
    # request i: retrieve takes i ms; generate 10*i ms with TTFT 10*i/4, skipped when i is a multiple of 5
    traces = [_trace(i, float(i), float(10 * i) if i % 5 else None) for i in range(1, 21)]
    summary = summarize(traces)
    assert summary["retrieve"]["n"] == 20
    assert summary["retrieve"]["p50"] == pytest.approx(10.5)  # 1..20: halfway between 10 and 11
    # generated: 10,20,30,40,60,...,190 (16 values); p95 at position 14.25 between 180 and 190
    assert summary["generate"]["n"] == 16  # the 4 skipped spans are left out
    assert summary["generate"]["p95"] == pytest.approx(182.5)
    # TTFT p50 at position 7.5: between 90/4 and 110/4
    assert summary["ttft_ms"]["p50"] == pytest.approx(25.0) and summary["ttft_ms"]["n"] == 16
    # totals: 11*i when generated, i when skipped; sorted, the top two are 198 and 209; p99 at position 18.81
    assert summary["total"]["n"] == 20
    assert summary["total"]["p99"] == pytest.approx(198 + 0.81 * 11)


def test_summarize_never_pools_one_key_across_stages() -> None:
    spans = [
        Span(name="rewrite", start_ms=0.0, ms=5.0, usage=Usage(attrs={"ttft_ms": 4.0, "queue_ms": 0.5})),
        Span(name="generate", start_ms=5.0, ms=50.0, usage=Usage(attrs={"ttft_ms": 30.0, "prefill_ms": 12.0})),
    ]
    summary = summarize([Trace(request_id="r", spans=spans, total_ms=55.0)])
    assert "ttft_ms" not in summary
    assert summary["rewrite.ttft_ms"]["p50"] == 4.0 and summary["generate.ttft_ms"]["p50"] == 30.0
    assert summary["queue_ms"]["p50"] == 0.5 and summary["prefill_ms"]["p50"] == 12.0  # one stage each: plain keys


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
