"""Models a sweep names as "trained:SPLIT": trained on that split of the sweep's dataset when the workspace has
none with the same key (data, base model, seed, hyperparameters), reused otherwise, and replaced by the
folder they load from. Every split is checked before the first model trains.

    embedders = ["sentence-transformers/all-MiniLM-L6-v2", "trained:train"]   # base vs tuned
    [stages.rerank]
    model = "trained:train"

A stage kind's spec names the field that may hold a trained reranker (`StageSpec.trained_reranker`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ragopt.config import trained_split


def resolve_trained_models(config: Any, workspace: Path, *, progress: bool = True) -> Any:
    """The sweep config with every "trained:SPLIT" embedder and reranker model replaced by its trained folder."""
    from ragopt.config import DEFAULT_EMBEDDER
    from ragopt.errors import InputError
    from ragopt.train.data import load_split
    from ragopt.train.embedder import EmbedderTrainingConfig, train_embedder
    from ragopt.train.reranker import RerankerTrainingConfig, train_reranker

    embedder_base = config.embedder.model if trained_split(config.embedder.model) is None else DEFAULT_EMBEDDER
    trainers: dict[str, Callable[[str], Path]] = {
        "embedders": lambda split: train_embedder(config.dataset, split, workspace, EmbedderTrainingConfig(
            base=embedder_base, seed=config.seed), progress=progress).path,
        "reranker": lambda split: train_reranker(config.dataset, split, workspace, RerankerTrainingConfig(
            seed=config.seed), progress=progress).path,
    }
    reranker_fields = _reranker_fields(config.stages)
    wanted = {"embedders": [config.embedder.model, *config.embedders],
              "reranker": [m for kind, name in reranker_fields for m in _as_list(config.stages[kind][name])]}
    splits = {(kind, s) for kind, models in wanted.items() for s in map(trained_split, models) if s is not None}
    if not splits:
        return config
    for kind, split in sorted(splits):  # every split checked before the first model trains
        if not split:
            raise InputError('"trained:" names no split; write e.g. "trained:train"',
                             field="embedders" if kind == "embedders" else f"stages.{reranker_fields[0][0]}.{reranker_fields[0][1]}")
        try:
            load_split(config.dataset, split)
        except InputError as exc:
            raise InputError(f"trained:{split}: {exc.message}", path=exc.path, line=exc.line, field=exc.field) from None
    # absolute: results.json records these folders, and `serve --from` may run from another directory
    folders = {(kind, split): str(trainers[kind](split).resolve()) for kind, split in sorted(splits)}

    def resolved(kind: str, model: Any) -> Any:
        split = trained_split(model)
        return model if split is None else folders[(kind, split)]

    update: dict[str, Any] = {
        "embedder": config.embedder.model_copy(update={"model": resolved("embedders", config.embedder.model)}),
        "embedders": [resolved("embedders", m) for m in config.embedders],
    }
    if reranker_fields:
        stages = {kind: dict(values) for kind, values in config.stages.items()}
        for kind, name in reranker_fields:
            models = stages[kind][name]
            stages[kind][name] = ([resolved("reranker", m) for m in models] if isinstance(models, list)
                                  else resolved("reranker", models))
        update["stages"] = stages
    return config.model_copy(update=update)


def _reranker_fields(stages: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(kind, field) of every configured stage whose spec lets that field name a trained reranker."""
    from ragopt.plan import spec_for

    fields = [(kind, spec_for(kind).trained_reranker) for kind in sorted(stages)]
    return [(kind, name) for kind, name in fields if name is not None and stages[kind].get(name) is not None]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def trained_label(model: str) -> str | None:
    """"tuned-SPLIT" for a folder a trainer published (see ragopt.train.loop.MANIFEST), else None."""
    import json

    from ragopt.train.loop import MANIFEST

    manifest = Path(model) / MANIFEST
    if not manifest.is_file():
        return None
    return "tuned-" + json.loads(manifest.read_text(encoding="utf-8"))["split"]
