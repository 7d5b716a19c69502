"""benchmarks/bench_tool.py's flags: --concurrency and --healthy-delay-s are read as given, and a bad flag is one
line naming it, exit 2, before any service starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_tool.py"


def test_the_load_flags_are_read() -> None:
    bench = load_script(SCRIPT)
    args = bench.parse_args(["--concurrency", "16", "--healthy-delay-s", "0.2"])
    assert (args.concurrency, args.healthy_delay_s, args.timeout_s) == (16, 0.2, 0.5)
    default = bench.parse_args([])
    assert (default.concurrency, default.healthy_delay_s) == (1, 0.0)


@pytest.mark.parametrize("flags, field", [
    (["--concurrency", "0"], "--concurrency"), (["--concurrency", "257"], "--concurrency"),
    (["--healthy-delay-s", "-0.1"], "--healthy-delay-s"), (["--healthy-delay-s", "0.5"], "--healthy-delay-s"),
    (["--timeout-s", "0"], "--timeout-s"), (["--delay-s", "0.4"], "--delay-s"), (["--questions", "0"], "--questions"),
    (["--breaker-failures", "0"], "--breaker-failures")])
def test_bad_flags_are_one_line(flags: list[str], field: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("bench_tool: ") and f"[{field}]" in done.stderr, done.stderr
