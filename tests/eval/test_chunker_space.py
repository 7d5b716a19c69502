"""Chunkers as a sweep dimension (ragopt/eval/chunker_space.py): `chunkers` x `chunk_sizes` x `chunk_overlaps` (for
the chunkers that read an overlap) x the [chunker] knobs each reads, whole documents once; trial ids keep their old
form for the tokens chunker; a knob no chunker of the sweep reads, or a bad value, is one line naming the key, exit 2,
before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.cli import one_line_error, ragopt

from ragopt.eval.space import SweepConfig


def test_the_grid_crosses_chunkers_sizes_overlaps_and_their_own_knobs() -> None:
    config = SweepConfig(chunk_sizes=[64, "whole"], chunk_overlaps=[0, 16], chunkers=["tokens", "recursive", "semantic"],
                         chunker={"percentile": [80, 95], "headers": "path"}, retrievers=["bm25"], top_k=[5])
    labels = [c.label for c in config.chunker_configs()]
    assert labels == ["64/0 headers=path", "64/16 headers=path", "recursive 64/0 headers=path",
                      "recursive 64/16 headers=path", "semantic 64 p80 headers=path", "semantic 64 p95 headers=path",
                      "whole headers=path"]
    ids = [tid.rsplit("_", 2)[0] for tid, _ in config.plans()]
    assert ids == ["c64-o0", "c64-o16", "recursive-c64-o0", "recursive-c64-o16", "semantic-c64-percentile80",
                   "semantic-c64-percentile95", "whole"]
    # the shape of trial ids before chunkers were a dimension
    assert [tid for tid, _ in SweepConfig(chunk_sizes=[128, "whole"], retrievers=["bm25"], top_k=[3]).plans()] == [
        "c128-o0_bm25_k3", "whole_bm25_k3"]
    assert [c.label for c in SweepConfig(chunkers=["recursive", "whole"], chunk_sizes=[32]).chunker_configs()] == [
        "recursive 32/0", "whole"]


@pytest.mark.parametrize(("setting", "detail"), [
    ('chunkers = ["tokens"]\n[chunker]\npercentile = [80, 95]', "chunker.percentile: not a knob of the chunkers tokens"),
    ('chunkers = ["semantic"]\n[chunker]\npercentile = [80, 120]', "chunker.percentile"),
    ('chunkers = ["recursive"]\n[chunker]\nsize = 64', "chunker.size: set by chunk_sizes"),
    ('chunkers = ["paragraphs"]', "chunkers"),
])
def test_a_bad_chunker_setting_is_one_line_naming_the_key(tmp_path: Path, setting: str, detail: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(f'retrievers = ["bm25"]\n{setting}\n', encoding="utf-8")
    line = one_line_error(ragopt("sweep", "--config", str(config), workspace=tmp_path / "ws"), "sweep")
    assert detail in line, line
    assert not (tmp_path / "ws").exists()


def test_set_chunker_knob_from_the_command_line(tmp_path: Path) -> None:
    line = one_line_error(ragopt("sweep", "--chunkers", "tokens", "--set", "chunker.min_size=8", workspace=tmp_path / "ws"), "sweep")
    assert "[--set]" in line and "chunker.min_size" in line, line
    assert not (tmp_path / "ws").exists()
