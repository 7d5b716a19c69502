"""A seeded, resumable training loop shared by the trainers, and the keyed model folders they publish.

A run is identified by a key (training data, base model, seed, hyperparameters). Its checkpoint (weights,
optimizer, schedule, torch RNG and the step reached) is written every few steps into `models/.ckpt-KEY`,
so an interrupted run resumes where it stopped and ends with the weights an uninterrupted one would have.
The finished model is saved beside it and published by one rename to `models/KIND-KEY`, the folder a later
run with the same key reuses without training.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

MANIFEST = "ragopt-training.json"


def training_key(kind: str, data_fp: str, base_fp: str, config: Any) -> str:
    """The identity of a trained model: data, base weights (not their name), seed and hyperparameters."""
    from ragopt.config import fingerprint

    return fingerprint({"kind": kind, "data": data_fp, "base": base_fp, "config": config.model_dump(mode="json", exclude={"base"})})


@dataclass
class Prepared:
    """What both trainers settle before any training: the split, the key its model is kept under, and the
    model itself when a run with the same key finished before."""

    evalset: Any
    data_fp: str
    base_fp: str
    key: str
    found: "TrainedModel | None"


def prepare(kind: str, dataset: str | Path, split: str, workspace: Path, config: Any) -> Prepared:
    """Check the base model, load the split and look for a finished model with the same key."""
    from ragopt.backends.embeddings import model_fingerprint
    from ragopt.stages.rerank import check_model_reference
    from ragopt.train.data import data_fingerprint, load_split

    check_model_reference(config.base, "--base")
    evalset = load_split(dataset, split)
    data_fp, base_fp = data_fingerprint(evalset), model_fingerprint(config.base)
    key = training_key(kind, data_fp, base_fp, config)
    return Prepared(evalset, data_fp, base_fp, key, find_trained(workspace, kind, key))


def describe_run(
    kind: str, key: str, config: Any, *, base_fp: str, data_fp: str, dataset: str | Path, split: str,
    losses: list[float], start: int, mine_s: float, train_s: float, **counts: int,
) -> dict[str, Any]:
    """The manifest saved with a model: its identity, the data it saw, and this run's times (a resumed run
    counts only its own training seconds)."""
    return {
        "kind": kind, "key": key, "base": config.base, "base_fingerprint": base_fp, "data_fingerprint": data_fp,
        "dataset": str(dataset), "split": split, "config": config.model_dump(mode="json"), **counts,
        "steps": len(losses), "resumed_from_step": start, "mine_seconds": round(mine_s, 1),
        "train_seconds": round(train_s, 1), "loss_first": _mean(losses[:20]), "loss_last": _mean(losses[-20:]),
    }


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


@dataclass
class TrainedModel:
    path: Path  # a folder that loads by path (SentenceTransformer / CrossEncoder)
    reused: bool  # found in the workspace: nothing was trained
    manifest: dict[str, Any]  # what it was trained from and how long it took (see MANIFEST)


def model_folder(workspace: Path, kind: str, key: str) -> Path:
    return Path(workspace) / "models" / f"{kind}-{key}"


def find_trained(workspace: Path, kind: str, key: str) -> TrainedModel | None:
    folder = model_folder(workspace, kind, key)
    if not (folder / MANIFEST).exists():
        return None
    return TrainedModel(folder, True, json.loads((folder / MANIFEST).read_text(encoding="utf-8")))


def train_steps(
    module: Any,
    batches: Sequence[Any],
    step_loss: Callable[[Any], Any],
    *,
    lr: float,
    warmup: float,
    checkpoint_dir: Path,
    checkpoint_every: int,
    progress: bool,
    desc: str,
    on_step: Callable[[int], None] | None = None,
) -> tuple[list[float], int]:
    """AdamW with linear warmup and decay over `batches`, one optimizer step each; returns (loss per step,
    the step this run started at). The caller seeds torch before building `module`; on resume the torch RNG
    state is restored too, so dropout draws the same masks. `on_step(step)` runs after each step (a test
    uses it to interrupt a run on purpose)."""
    import torch
    from ragopt.progress import progress_bar
    from transformers import get_linear_schedule_with_warmup

    optimizer = torch.optim.AdamW(module.parameters(), lr=lr)
    total = len(batches)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(warmup * total), total)
    checkpoint = checkpoint_dir / "checkpoint.pt"
    losses: list[float] = []
    start = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        losses, start = state["losses"], state["step"]
    module.train()
    bar = progress_bar(total=total, initial=start, desc=desc, unit="step", disable=not progress)
    for step in range(start, total):
        loss = step_loss(batches[step])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
        bar.update(1)
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.4f}")
        done = step + 1
        if done % checkpoint_every == 0 and done < total:
            _save_checkpoint(checkpoint, {
                "model": module.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": torch.get_rng_state(), "losses": losses, "step": done,
            })
        if on_step is not None:
            on_step(done)
    bar.close()
    module.eval()
    return losses, start


def _save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)  # a run killed mid-save leaves the previous checkpoint intact


def publish(save: Callable[[Path], None], workspace: Path, kind: str, key: str, manifest: dict[str, Any]) -> TrainedModel:
    """Save the model into a temporary folder, write its manifest, rename it into place, drop the checkpoint."""
    final = model_folder(workspace, kind, key)
    tmp = final.parent / f".tmp-{kind}-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (final / MANIFEST).exists():
            raise  # not a race with another process that published the same key first
    shutil.rmtree(checkpoint_folder(workspace, kind, key), ignore_errors=True)
    return TrainedModel(final, False, manifest)


def checkpoint_folder(workspace: Path, kind: str, key: str) -> Path:
    return Path(workspace) / "models" / f".ckpt-{kind}-{key}"
