"""`ragopt train-embedder` in process: trains on the tiny corpus, copies the model to --out (which loads by
path), reuses it on a second run; bad input is one line naming the flag or file, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragopt.cli import main

FAST = ["--epochs", "1", "--batch-size", "4", "--max-seq-length", "64", "--mine-depth", "10"]


def test_trains_copies_to_out_and_reuses(tiny_beir: Path, workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "tuned"
    args = ["--workspace", str(workspace), "train-embedder", "--dataset", str(tiny_beir), "--split", "test", "--out", str(out), *FAST]
    assert main(args) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(out)
    assert SentenceTransformer(str(out), device="cpu").encode(["x"]).shape == (1, 384)
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reused"] is True and report["split"] == "test" and report["path"] == str(out)


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--split", "train"], "train.tsv"),  # the tiny set has only test qrels
        (["--epochs", "0"], "--epochs"),
        (["--negatives", "0"], "--negatives"),
        (["--base", "/no/such/model"], "--base"),
        (["--threads", "0"], "--threads"),
    ],
)
def test_bad_input_is_one_line_naming_it(
    extra: list[str], named: str, tiny_beir: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--workspace", str(workspace), "train-embedder", "--dataset", str(tiny_beir), *FAST, *extra]
    if "--split" not in extra:
        args += ["--split", "test"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err
    assert not (workspace / "models").exists()
