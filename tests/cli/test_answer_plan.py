"""`ask` and `serve` without --from, --plan or a flag that shapes the plan (ragopt/cli/_answer_plan.py): the
workspace's last sweep selection (runs/sweep/results.json) where there is one, else the measured default chunker
(ANSWER_CHUNKER), not whole documents; each said on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.cli import ragopt
from fixtures.serving import serve_options
from fixtures.tiny_corpus import write_beir

from ragopt.config import ANSWER_CHUNKER


def test_ask_answers_with_the_last_sweep_else_the_default_chunker(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    ws = tmp_path / "ws"
    plain = ragopt("ask", "--dataset", str(dataset), "--extractive", "--no-stream", "What causes ocean tides?", workspace=ws)
    assert plain.returncode == 0, plain.stderr
    assert f"note: cutting the documents with the default chunker, {ANSWER_CHUNKER.label}" in plain.stderr
    assert "last sweep" not in plain.stderr
    swept = ragopt("sweep", "--dataset", str(dataset), "--chunk-sizes", "whole", "--retrievers", "bm25", "--top-k", "3",
                   "--out", str(ws / "runs" / "sweep"), "--no-progress", workspace=ws)
    assert swept.returncode in (0, 1), swept.stderr
    asked = ragopt("ask", "--no-stream", "What causes ocean tides?", workspace=ws)
    assert asked.returncode == 0, asked.stderr
    assert f"note: answering with the last sweep's selection in {ws / 'runs' / 'sweep' / 'results.json'}" in asked.stderr
    flagged = ragopt("ask", "--top-k", "2", "--no-stream", "What causes ocean tides?", workspace=ws)  # flags choose
    assert "last sweep" not in flagged.stderr


def test_serve_takes_the_default_chunker_or_the_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no runs/sweep here or in the workspace
    dataset = write_beir(tmp_path / "tiny")
    assert serve_options(["--dataset", str(dataset)]).plan.chunker == ANSWER_CHUNKER
    assert serve_options(["--dataset", str(dataset), "--whole-docs"]).plan.chunker.chunker == "whole"
    chosen = serve_options(["--dataset", str(dataset), "--chunker", "semantic", "--chunk-size", "64"]).plan.chunker
    assert (chosen.chunker, chosen.size) == ("semantic", 64)
