"""benchmarks/bench_fairness.py's one-slot check: a quiet request that waited is set against the request holding
the slot when it arrived, and a wait past that request's end (someone else went first) is counted; and
benchmarks/bench_batch_floor.py refuses bad flags with one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.scripts import load_script

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    return load_script(BENCHMARKS / "bench_fairness.py")


def request(tenant: str, start_s: float, queue_s: float, end_s: float, tokens: int = 100) -> dict:
    return {"tenant": tenant, "start_s": start_s, "queue_ms": queue_s * 1000, "end_s": end_s, "tokens_in": tokens, "tokens_out": 0}


def test_a_wait_that_ends_with_the_holder_is_within_one_service(bench) -> None:  # type: ignore[no-untyped-def]
    requests = [request("flood", 0.0, 0.0, 2.0),  # holds the slot 0-2 s
                request("quiet", 0.5, 1.5, 4.0),  # arrives at 0.5, starts at 2.0: waited for the holder only
                request("flood", 0.1, 3.9, 6.0)]
    waits = bench.waits_behind_holder(requests, "quiet")
    assert waits["waited"] == waits["matched"] == 1
    assert waits["over_one_service"] == 0
    assert waits["max_wait_over_holder_service"] == pytest.approx(0.75)
    assert waits["max_after_holder_s"] == pytest.approx(0.0)


def test_a_wait_past_the_holder_is_counted(bench) -> None:  # type: ignore[no-untyped-def]
    requests = [request("flood", 0.0, 0.0, 2.0),
                request("flood", 0.2, 1.8, 4.0),  # took the slot after the holder, ahead of the quiet request
                request("quiet", 0.5, 3.5, 6.0)]
    waits = bench.waits_behind_holder(requests, "quiet")
    assert waits["over_one_service"] == 1
    assert waits["max_after_holder_s"] == pytest.approx(2.0)
    assert waits["max_wait_over_holder_service"] == pytest.approx(1.75)
    assert waits["cases"][0]["next"][0][1:] == ("flood", 100) and waits["cases"][0]["previous_tokens"] is None


def test_of_two_overlapping_holders_the_one_granted_last_is_the_holder(bench) -> None:  # type: ignore[no-untyped-def]
    requests = [request("flood", 0.0, 0.0, 2.02),  # released at 2.0; its last bytes reached the client at 2.02
                request("flood", 0.3, 1.7, 4.0),  # granted at 2.0
                request("quiet", 2.01, 1.99, 6.0)]  # arrived as the first one's bytes were still arriving
    waits = bench.waits_behind_holder(requests, "quiet")
    assert waits["over_one_service"] == 0 and waits["max_after_holder_s"] == pytest.approx(0.0)


def test_requests_that_did_not_wait_are_left_out(bench) -> None:  # type: ignore[no-untyped-def]
    assert bench.waits_behind_holder([request("quiet", 0.0, 0.0, 2.0), request("flood", 2.0, 0.05, 4.0)], "quiet") is None


@pytest.mark.parametrize("flags", [["--busy", "4", "--parallel", "4"], ["--probes", "0"]])
def test_bench_batch_floor_refuses_bad_flags(flags: list[str]) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_batch_floor.py"), *flags], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("bench_batch_floor: error:")
    assert done.stdout == ""
