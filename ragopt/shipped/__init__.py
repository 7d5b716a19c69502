"""What ragopt ships besides code: the hospital evaluation set (evalsets/hospital) and the sweep configs
(pipelines/*.toml). They lie at the top of the repository and travel in the wheel as package data
(ragopt/shipped/evalsets, ragopt/shipped/pipelines: pyproject.toml maps the folders there), found through
importlib.resources, so an installed wheel runs the main job in any folder, as a source checkout does. Every
reader of them goes through this module."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DEFAULT_CONFIG = "hospital-sweep"


def _folder(name: str) -> Path:
    """The shipped folder `name` (evalsets or pipelines): inside the installed package, or, in a source checkout
    (where the package folder does not hold it), at the top of the repository."""
    root = resources.files(__name__)
    if not isinstance(root, Path):  # a zipped install: the loaders and the index read real files
        raise RuntimeError(f"ragopt's shipped data must be installed as files, not read from {root}")
    installed = root / name
    return installed if installed.is_dir() else root.parents[1] / name


def shipped_dataset() -> Path:
    """The shipped evaluation set's folder: `ragopt sweep` sweeps it when no --dataset is given."""
    return _folder("evalsets") / "hospital"


def shipped_collection_runs() -> Path:
    """The ingestion runs the shipped collection-status service serves (ragopt.backends.collection_status)."""
    return shipped_dataset() / "collection_runs.jsonl"


def shipped_configs() -> list[Path]:
    """Every shipped sweep config, by name."""
    return sorted(_folder("pipelines").glob("*.toml"))


def shipped_config(name: str = DEFAULT_CONFIG) -> Path | None:
    """The shipped sweep config called `name` (with or without .toml), or None when there is none."""
    stem = name.removesuffix(".toml")
    return next((path for path in shipped_configs() if path.stem == stem), None)


def default_config_for(dataset: Path) -> Path | None:
    """The shipped config made for `dataset`: it says `default_for_dataset = true` and its `dataset` is a folder
    of the same name (cmrc-sweep.toml for any cmrc2018_dev folder, wherever the data lies); None if none is."""
    import tomllib

    for path in shipped_configs():
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        own = data.get("dataset")
        if data.get("default_for_dataset") and own and Path(own).name == dataset.resolve().name:
            return path
    return None


def resolve_config(value: str) -> Path:
    """A --config value as a file: the path when it exists, else the shipped config of that name (so
    `--config hospital-citations` works wherever ragopt is installed), else the path as given (its reader then
    says it is not found)."""
    path = Path(value)
    if path.exists() or path.parent != Path("."):
        return path
    return shipped_config(value) or path
