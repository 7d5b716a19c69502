"""`ragopt sweep --dataset D` without --config takes the shipped config made for D (cmrc-sweep.toml for
CMRC 2018 dev), and only that one. `ragopt sweep > log 2>&1` writes plain progress lines: no carriage return,
no line over 120 columns; --no-progress writes none; on a terminal, bars as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fixtures.cli import ragopt_stderr_on_a_terminal
from fixtures.tiny_corpus import write_beir

from ragopt.shipped import default_config_for, shipped_config

CHECKOUT = Path(__file__).resolve().parents[2]


def test_the_cmrc_config_is_the_default_for_its_dataset_and_names_what_the_issue_asks() -> None:
    from ragopt.config import load_toml
    from ragopt.eval.sweep import SweepConfig

    found = default_config_for(CHECKOUT.parent / "shared" / "data" / "cmrc2018_dev")
    assert found == shipped_config("cmrc-sweep") and found is not None
    config = load_toml(found, SweepConfig)
    assert config.chunk_sizes == [64, 128, 256, "whole"] and config.answers == "extractive" and 5 in config.top_k


def test_other_datasets_keep_the_built_in_defaults(tmp_path: Path) -> None:
    assert default_config_for(CHECKOUT.parent / "shared" / "data" / "scifact") is None  # its config is not a default
    assert default_config_for(tmp_path) is None


def test_the_default_follows_the_folder_name_wherever_the_data_lies(tmp_path: Path) -> None:
    """An installed wheel's configs cannot point at the user's data: a folder named like the config's dataset is it."""
    assert default_config_for(tmp_path / "elsewhere" / "cmrc2018_dev") == shipped_config("cmrc-sweep")


def test_a_long_note_is_wrapped_to_the_terminal(capsys) -> None:  # type: ignore[no-untyped-def]
    from ragopt.cli.sweep import _print_selection
    from ragopt.eval.report_terminal import TABLE_WIDTH
    from ragopt.eval.results import Costs, DatasetInfo, GateVerdict, SweepResults, Trial, TrialParams, Versions

    message = ("recall@5 = 0.9010, needs >= 0.9, passes by 0.0010; within noise: the 95% interval [0.8700, 0.9300] "
               "straddles 0.9")
    verdict = GateVerdict(gate="recall@5>=0.9", metric="recall@5", op=">=", threshold=0.9, observed=0.901, passed=True,
                          margin=0.001, message=message, within_noise=True)
    trial = Trial(id="c64-o16_hybrid-rrf_k5", params=TrialParams(chunker="64/16", retriever="hybrid", top_k=5),
                  metrics={"recall@5": 0.901}, costs=Costs(context_tokens=450.0))
    results = SweepResults(dataset=DatasetInfo(name="t", path="t", fingerprint="f", n_documents=1, n_queries=1),
                           versions=Versions(ragopt="0", python="3"), objective="o", trials=[trial], selected=trial.id,
                           verdicts={trial.id: [verdict]})
    assert _print_selection(results) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= TABLE_WIDTH
    assert " ".join(out.split()).endswith(f"note: gate recall@5>=0.9 passes only within noise: {message}")


def test_a_sweep_into_a_log_file_writes_plain_lines_within_120_columns(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    env = {**os.environ, "RAGOPT_HOME": str(tmp_path / "ws"), "PYTHONPATH": str(CHECKOUT)}
    logs = {}
    for name, extra in (("log", []), ("quiet", ["--no-progress"])):
        with open(tmp_path / name, "w") as log:  # `ragopt sweep > log 2>&1`
            done = subprocess.run([sys.executable, "-m", "ragopt", "sweep", "--dataset", str(dataset), "--retrievers", "bm25",
                                   "--top-k", "3,5", "--out", str(tmp_path / f"{name}-out"), *extra],
                                  stdout=log, stderr=subprocess.STDOUT, env=env, timeout=600)
        assert done.returncode == 0
        logs[name] = (tmp_path / name).read_text()
    text = logs["log"]
    assert "\r" not in text and max(len(line) for line in text.splitlines()) <= 120
    assert any(line.startswith("trials: 2 trials in ") for line in text.splitlines())
    assert "trials: " not in logs["quiet"] and "\r" not in logs["quiet"]
    code, drawn = ragopt_stderr_on_a_terminal("sweep", "--dataset", str(dataset), "--retrievers", "bm25", "--top-k", "3,5",
                                              "--out", str(tmp_path / "tty-out"), workspace=tmp_path / "ws")
    assert code == 0 and "trials: 100%|" in drawn and "\r" in drawn  # on a terminal: tqdm's bars, as before


def test_the_chroma_config_runs_on_any_set_and_names_bad_settings_in_one_line(tmp_path: Path) -> None:
    """chroma-chunking is the default for a chroma_chunking folder; with --config it takes any set (--dataset); a bad
    knob or gate is one line, exit 2, before any work."""
    from fixtures.cli import one_line_error, ragopt

    assert default_config_for(tmp_path / "chroma_chunking") == shipped_config("chroma-chunking")
    hospital = CHECKOUT / "evalsets" / "hospital"
    for extra, flag, detail in ((["--set", "small_to_big.window=paragraphs"], "[--set]", "small_to_big.window"),
                                (["--set", "small_to_big.windows=2"], "[--set]", "windows"),
                                (["--gate", "chars_iou@5>>0.1"], "gate", "chars_iou@5>>0.1"),
                                (["--gate", "chars_iuo@5>=0.1"], "gate", "chars_iuo@5")):
        done = ragopt("sweep", "--config", "chroma-chunking", "--dataset", str(hospital), *extra, workspace=tmp_path / "ws")
        line = one_line_error(done, "sweep")
        assert flag in line and detail in line, line
        assert not any((tmp_path / "ws").rglob("*"))  # nothing written (a gate is read once the workspace is named)


def test_a_config_files_gate_on_an_unknown_metric_names_the_file_before_a_workspace_exists(tmp_path: Path) -> None:
    from fixtures.cli import one_line_error, ragopt

    config = tmp_path / "gated.toml"
    config.write_text(f'dataset = "{CHECKOUT / "evalsets" / "hospital"}"\nretrievers = ["bm25"]\ngates = ["recal@5>=0.9"]\n')
    line = one_line_error(ragopt("sweep", "--config", str(config), workspace=tmp_path / "ws"), "sweep")
    assert "gated.toml [gates]" in line and "recal@5" in line, line
    line = one_line_error(ragopt("sweep", "--config", str(config), "--gate", "x>=1", workspace=tmp_path / "ws"), "sweep")
    assert "gated.toml [gates]" in line, line  # the file's gates are read first
    config.write_text(f'dataset = "{CHECKOUT / "evalsets" / "hospital"}"\nretrievers = ["bm25"]\n')
    line = one_line_error(ragopt("sweep", "--config", str(config), "--gate", "ndgc@10>=0.5", workspace=tmp_path / "ws"), "sweep")
    assert "[--gate]" in line and "gated.toml" not in line and "ndgc@10" in line, line
    assert not (tmp_path / "ws").exists()
