"""ragopt.progress: bars on a terminal; elsewhere one plain line per stage when it ends, nothing when disabled."""

from __future__ import annotations

import pytest

from ragopt.progress import LINE_WIDTH, PlainProgress, progress_bar


def test_off_a_terminal_a_stage_is_one_plain_line_when_it_ends(capsys: pytest.CaptureFixture[str]) -> None:
    bar = progress_bar(range(3), desc="trials", unit="trial")  # pytest's stderr is not a terminal
    assert isinstance(bar, PlainProgress)
    assert list(bar) == [0, 1, 2]
    with progress_bar(total=10, desc="embedding " + "x" * 200, unit="text", leave=False) as counted:
        counted.update(4)
        counted.set_postfix(loss="0.1234")
    for _ in progress_bar(["a"], desc="queries", unit="query"):
        pass
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 3 and "\r" not in err and all(len(line) <= LINE_WIDTH for line in lines)
    assert lines[0].startswith("trials: 3 trials in ") and lines[0].endswith(" s")
    assert lines[1].startswith("embedding xxx") and len(lines[1]) == LINE_WIDTH  # a long description is cut
    assert lines[2].startswith("queries: 1 query in ")


def test_disabled_or_empty_stages_print_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress_bar(range(2), desc="trials", disable=True)) == [0, 1]
    with progress_bar(total=0, desc="embedding") as bar:
        bar.update(0)
    assert capsys.readouterr().err == ""
    with progress_bar(total=5, desc="steps", unit="step", initial=2) as bar:
        bar.update(1)
    assert capsys.readouterr().err.startswith("steps: 3/5 steps in ")
