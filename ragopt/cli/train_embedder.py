"""`ragopt train-embedder`: fine-tune the bi-encoder on a split's qrels (hard negatives from ragopt's index).

The model is kept in the workspace keyed by (data, base model, seed, hyperparameters), so the same command
again reuses it, and an interrupted run resumes from its last checkpoint. `--out` gets a copy that loads by
path: `ragopt eval --embedder OUT`. The flags and the output helpers here serve `train-reranker` too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ragopt.cli import _common
from ragopt.errors import InputError

# config field -> the flag that sets it, so a range error names the flag
FLAGS = {
    "base": "--base", "epochs": "--epochs", "batch_size": "--batch-size", "lr": "--lr", "warmup": "--warmup",
    "max_seq_length": "--max-seq-length", "max_length": "--max-length", "seed": "--seed",
    "miner": "--miner", "depth": "--mine-depth", "negatives": "--negatives", "skip": "--skip-top",
}


def add_training_args(p: argparse.ArgumentParser, *, batch_size: int, lr: float) -> None:
    p.add_argument("--dataset", required=True, help="a BEIR folder with qrels/<split>.tsv")
    p.add_argument("--split", default="train", help="the qrels split to train on (default: train)")
    p.add_argument("--out", default=None, help="also copy the trained model folder here (it loads by path)")
    p.add_argument("--base", default=None, help="the model to start from (default: the packaged all-MiniLM-L6-v2)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--lr", type=float, default=lr, help="peak learning rate (AdamW, linear warmup and decay)")
    p.add_argument("--warmup", type=float, default=0.1, help="share of the steps with a rising learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--miner", choices=["bm25", "hybrid"], default="bm25", help="retriever whose top non-relevant hits are the negatives")
    p.add_argument("--mine-depth", type=int, default=30, help="hits searched for negatives per query")
    p.add_argument("--negatives", type=int, default=1, help="hard negatives per (query, positive)")
    p.add_argument("--skip-top", type=int, default=0, help="best-ranked non-relevant hits passed over (often unjudged positives)")
    p.add_argument("--threads", type=int, default=None, help="torch threads for training (default: torch's own choice)")
    p.add_argument("--json", action="store_true", help="print the model's manifest as one JSON object")


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("train-embedder", help="fine-tune the embedding model on a split's qrels with mined hard negatives")
    add_training_args(p, batch_size=32, lr=3e-5)
    p.add_argument("--max-seq-length", type=int, default=128, help="tokens per text while training (inference keeps the base model's)")
    return p


def training_config(model: type[BaseModel], args: argparse.Namespace, **fields: Any) -> Any:
    """The config from the flags; a value out of range is an InputError naming its flag."""
    from ragopt.train import MiningConfig

    shared = {k: getattr(args, k) for k in ("epochs", "batch_size", "lr", "warmup", "seed")}
    if args.base is not None:
        shared["base"] = args.base
    try:
        mining = MiningConfig(miner=args.miner, depth=args.mine_depth, negatives=args.negatives, skip=args.skip_top)
        return model(**shared, **fields, mining=mining)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(err["msg"], field=FLAGS.get(str(err["loc"][-1]), str(err["loc"][-1]))) from None


def check_out(out: str | None) -> None:
    """--out may be new, empty, or a model folder an earlier run wrote; anything else is refused up front."""
    from ragopt.train.loop import MANIFEST

    if out is None:
        return
    path = Path(out)
    if path.exists() and not (path.is_dir() and (not any(path.iterdir()) or (path / MANIFEST).exists())):
        raise InputError("exists and is not a model folder ragopt wrote; choose another --out", path=out, field="--out")


def copy_out(model_dir: Path, out: str) -> Path:
    """Copy the model to --out, replacing an earlier model there only once the copy is complete."""
    dest = Path(out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(model_dir, tmp)
    if dest.exists():
        old = dest.parent / f".{dest.name}.old{os.getpid()}"
        os.rename(dest, old)
        os.rename(tmp, dest)
        shutil.rmtree(old)
    else:
        os.rename(tmp, dest)
    return dest


def report(args: argparse.Namespace, trained: Any, what: str) -> int:
    path = copy_out(trained.path, args.out) if args.out else trained.path
    m = trained.manifest
    if args.json:
        print(json.dumps({"path": str(path), "reused": trained.reused, **m}))
        return 0
    state = "reused" if trained.reused else f"trained in {m['train_seconds']:.0f} s (+{m['mine_seconds']:.0f} s mining)"
    print(f"{what} {state}: {m['steps']} steps, loss {m['loss_first']} -> {m['loss_last']}")
    print(path)
    return 0


def pin_threads(threads: int | None) -> None:
    if threads is not None:
        if threads < 1:
            raise InputError("must be at least 1", field="--threads")
        import torch

        torch.set_num_threads(threads)  # the user asked for it on the command line


def run(args: argparse.Namespace) -> int:
    from ragopt.train import EmbedderTrainingConfig, train_embedder

    config = training_config(EmbedderTrainingConfig, args, max_seq_length=args.max_seq_length)
    check_out(args.out)
    pin_threads(args.threads)
    trained = train_embedder(args.dataset, args.split, _common.workspace(args), config, progress=sys.stderr.isatty() and not args.json)
    return report(args, trained, "embedder")
