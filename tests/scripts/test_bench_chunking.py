"""benchmarks/bench_chunking.py's own parts: chunks located in order (a repeated piece is found where it follows the
previous chunk), Chroma's character scores by hand, and bad flags one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_chunking.py"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    return load_script(SCRIPT)


def test_chunks_are_located_in_order_even_when_repeated(bench) -> None:  # type: ignore[no-untyped-def]
    text = "ab ab ab cd"
    assert bench.locate(text, ["ab", "ab", "ab cd"]) == [(0, 2), (3, 5), (6, 11)]
    assert bench.locate(text, ["ab ab", "ab ab"]) == [(0, 5), (3, 8)]  # an overlapping chunk starts after the last start
    with pytest.raises(ValueError):
        bench.locate(text, ["cd", "ab"])


def test_chroma_scores_by_hand(bench) -> None:  # type: ignore[no-untyped-def]
    evidence = [("d", 10, 20), ("d", 30, 40)]
    passages = [("d", 0, 15), ("d", 12, 35), ("e", 0, 50)]
    assert bench.chroma_scores(passages, evidence, 2) == pytest.approx((15 / 20, 15 / 38, 15 / 43))
    assert bench.chroma_scores(passages, evidence, 3) == pytest.approx((15 / 20, 15 / 88, 15 / 93))
    assert bench.chroma_scores([], evidence, 5) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("argv, flag", [(["--k", "0"], "[--k]"), (["--only", "no-such-scenario"], "[--only]"),
                                        (["--dataset", "/nonexistent/set"], "[--dataset]")])
def test_bad_flags_are_one_line(argv: list[str], flag: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *argv, "--workspace", str(tmp_path / "ws")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench_chunking: ") and flag in lines[0] and "Traceback" not in done.stderr
