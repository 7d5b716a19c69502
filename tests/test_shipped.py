"""ragopt.shipped: the evaluation set and sweep configs that travel in the package, found by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.shipped import resolve_config, shipped_config, shipped_configs, shipped_dataset

REPO = Path(__file__).resolve().parents[1]


def test_the_shipped_files_lie_at_the_top_of_the_checkout() -> None:
    assert shipped_dataset() == REPO / "evalsets" / "hospital"
    assert {p.name for p in shipped_dataset().iterdir()} >= {"corpus.jsonl", "questions.jsonl", "followups.jsonl"}
    assert {p.stem for p in shipped_configs()} >= {"hospital-sweep", "hospital-citations", "hospital-routed", "cmrc-sweep",
                                                "scifact-sweep"}
    assert shipped_config() == REPO / "pipelines" / "hospital-sweep.toml"


def test_the_build_configuration_lists_every_package_and_maps_the_shipped_folders_into_the_package() -> None:
    """pyproject.toml writes its package list out (a folder mapped into the package needs that): a package missing
    from it, or an evaluation set's folder, would be left out of the wheel."""
    import tomllib

    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    code = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "ragopt").rglob("__init__.py")}
    sets = {f"ragopt.shipped.evalsets.{p.name}" for p in (REPO / "evalsets").iterdir() if p.is_dir()}
    assert sorted(setuptools["packages"]) == sorted(code | sets | {"ragopt.shipped.evalsets", "ragopt.shipped.pipelines"})
    assert setuptools["package-dir"] == {"ragopt.shipped.evalsets": "evalsets", "ragopt.shipped.pipelines": "pipelines"}


def test_the_hospital_configs_name_the_shipped_set_relative_to_themselves() -> None:
    import tomllib

    for name in ("hospital-sweep", "hospital-citations", "hospital-routed"):
        path = shipped_config(name)
        assert path is not None
        dataset = tomllib.loads(path.read_text(encoding="utf-8"))["dataset"]
        assert (path.parent / dataset).resolve() == shipped_dataset().resolve()


def test_a_config_value_is_a_path_first_then_a_shipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_config("hospital-citations") == shipped_config("hospital-citations")
    assert resolve_config("hospital-citations.toml") == shipped_config("hospital-citations")
    (tmp_path / "hospital-citations.toml").write_text("top_k = [5]\n")  # a file of that name here wins
    assert resolve_config("hospital-citations.toml") == Path("hospital-citations.toml")
    assert resolve_config("sub/hospital-sweep.toml") == Path("sub/hospital-sweep.toml")  # a path is never a name
    assert resolve_config("no-such-config") == Path("no-such-config")
