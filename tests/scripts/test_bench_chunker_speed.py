"""benchmarks/bench_chunker_speed.py: ragopt's recursive chunker and chonkie's cut the same corpus, ragopt's within
the size in MiniLM word pieces (chonkie sums its pieces' counts, which can pass it), each timed cold; bad sizes are
one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.scripts import load_script
from fixtures.tiny_corpus import write_beir

BENCH = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "bench_chunker_speed.py")


def test_both_chunkers_cut_within_the_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_beir(tmp_path / "tiny")
    assert BENCH.main(["--dataset", str(dataset), "--sizes", "8,16", "--rounds", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["size"] for r in out["rows"]] == [8, 16]
    for row in out["rows"]:
        assert row["chonkie"]["mb_per_s"] > 0 and row["chonkie"]["chunks"] > 0  # its chunks may pass the size
        assert row["ragopt"]["mb_per_s"] > 0 and 0 < row["ragopt"]["max_tokens"] <= row["size"], row
        assert row["ratio"] == row["ragopt"]["mb_per_s"] / row["chonkie"]["mb_per_s"]


def test_a_bad_size_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert BENCH.main(["--sizes", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[--sizes/--rounds]" in err[0]
