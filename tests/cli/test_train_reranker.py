"""`ragopt train-reranker` in process: an --out that holds something else is refused before any work (one
line naming --out, exit 2, the folder untouched); a bad flag value names the flag. Training itself is
covered in tests/train/test_reranker.py and the shared flags in test_train_embedder.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.cli import main


def test_an_out_that_holds_something_else_is_refused_before_training(
    tiny_beir: Path, workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "occupied"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ["--workspace", str(workspace), "train-reranker", "--dataset", str(tiny_beir), "--split", "test", "--out", str(out)]
    assert main(args) == 2
    assert "--out" in capsys.readouterr().err
    assert not (workspace / "models").exists() and (out / "notes.txt").read_text() == "mine"


def test_a_bad_max_length_names_its_flag(tiny_beir: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--workspace", str(workspace), "train-reranker", "--dataset", str(tiny_beir), "--split", "test", "--max-length", "4"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--max-length" in err
