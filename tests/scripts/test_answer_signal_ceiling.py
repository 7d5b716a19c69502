"""scripts/answer_signal_ceiling.py: the grid finds the weighting that cites gold passages most often, and bad
flags are one line, exit 2, before any dataset is read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fixtures.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "answer_signal_ceiling.py"


def _script():
    return load_script(SCRIPT)


def _row(rank: list[float], title: list[float], doc_ok: list[float]) -> dict:
    """One query's candidates (one per passage here): rank and title signals, gold per candidate, floor = [1]."""
    return {"signals": {"rank": np.array(rank), "title": np.array(title)}, "doc_ok": np.array(doc_ok),
            "floor": {"doc_ok": doc_ok[0]}}


def test_the_ceiling_is_the_weighting_right_most_often_and_it_is_compared_with_citing_the_first_passage() -> None:
    # in three queries of four the top passage is wrong and the title signal points at the right one; in the
    # fourth the title points away from a right top passage. No weighting gets all four (the first three need
    # title > rank / 2, the fourth title < rank / 2), title-heavy ones get 3 of 4, rank alone (the floor) 1
    rows = [_row([1.0, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]) for _ in range(3)]
    rows.append(_row([1.0, 0.0, 0.5], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]))
    result = _script()._ceiling(rows, ("rank", "title"), "doc_ok")
    assert result["floor"] == 0.25
    assert result["value"] == 0.75
    assert result["weights"]["title"] > result["weights"]["rank"] / 2
    assert result["n"] == 4 and result["diff"] == pytest.approx(0.5)


@pytest.mark.parametrize("args, needle", [
    (["--chunk-size", "abc"], "--chunk-size"),
    (["--top-k", "0"], "--top-k"),
    (["--dataset", "/nonexistent"], "/nonexistent"),
])
def test_bad_flags_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and needle in lines[0], done.stderr
