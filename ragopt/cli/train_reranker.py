"""`ragopt train-reranker`: train a cross-encoder on a split's qrels (hard negatives from ragopt's index).

Kept in the workspace keyed by (data, base model, seed, hyperparameters); `--out` gets a copy that the
rerank stage loads by path (`RerankConfig(model=OUT, depth=...)`).
"""

from __future__ import annotations

import argparse
import sys

from ragopt.cli import _common
from ragopt.cli.train_embedder import add_training_args, check_out, pin_threads, report, training_config


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("train-reranker", help="train a cross-encoder reranker on a split's qrels with mined hard negatives")
    add_training_args(p, batch_size=16, lr=3e-5)
    p.add_argument("--max-length", type=int, default=256, help="tokens per (query, passage) pair")
    return p


def run(args: argparse.Namespace) -> int:
    from ragopt.train import RerankerTrainingConfig, train_reranker

    config = training_config(RerankerTrainingConfig, args, max_length=args.max_length)
    check_out(args.out)
    pin_threads(args.threads)
    trained = train_reranker(args.dataset, args.split, _common.workspace(args), config, progress=sys.stderr.isatty() and not args.json)
    return report(args, trained, "reranker")
