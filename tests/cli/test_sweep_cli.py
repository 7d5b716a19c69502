"""`ragopt sweep --dataset D` without --config takes the shipped config made for D (pipelines/cmrc-sweep.toml for
CMRC 2018 dev), and only that one."""

from __future__ import annotations

from pathlib import Path

from ragopt.cli.sweep import SHIPPED_CONFIG, dataset_default_config

PIPELINES = SHIPPED_CONFIG.parent
CHECKOUT = PIPELINES.parent


def test_the_cmrc_config_is_the_default_for_its_dataset_and_names_what_the_issue_asks() -> None:
    from ragopt.config import load_toml
    from ragopt.eval.sweep import SweepConfig

    found = dataset_default_config(CHECKOUT.parent / "shared" / "data" / "cmrc2018_dev")
    assert found == PIPELINES / "cmrc-sweep.toml"
    config = load_toml(found, SweepConfig)
    assert config.chunk_sizes == [64, 128, 256, "whole"] and config.answers == "extractive" and 5 in config.top_k


def test_other_datasets_keep_the_built_in_defaults(tmp_path: Path) -> None:
    assert dataset_default_config(CHECKOUT.parent / "shared" / "data" / "scifact") is None  # its config is not a default
    assert dataset_default_config(tmp_path) is None
