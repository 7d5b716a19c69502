"""`ragopt sweep --dataset D` without --config takes the shipped config made for D (cmrc-sweep.toml for
CMRC 2018 dev), and only that one."""

from __future__ import annotations

from pathlib import Path

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
