"""scripts/select_answer_weights.py refuses bad flags in one line, exit 2, before any dataset is read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "select_answer_weights.py"


@pytest.mark.parametrize("args, needle", [
    (["--sets", "scifact,nope"], "--sets"),
    (["--select-queries", "0"], "--select-queries"),
    (["--data", "/nonexistent"], "/nonexistent"),
])
def test_bad_flags_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and needle in lines[0], done.stderr
