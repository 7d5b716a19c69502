"""`ragopt index`: build (or reuse) the index of a dataset's corpus or of your own documents (--docs)."""

from __future__ import annotations

import argparse

from ragopt.cli import _common


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("index", help="chunk, embed and index a corpus (a no-op when it exists)")
    _common.add_dataset_args(p)
    _common.add_chunking_args(p)
    return p


def run(args: argparse.Namespace) -> int:
    _common.chunker_config(args)  # flags first: nothing is read before they are known to be valid
    _common.embedder_config(args)
    _common.store_config(args)
    report, _ = _common.build(args, _common.documents(args))
    print(f"index {report.index.manifest.id} at {report.index.path}  time {report.seconds:.2f} s  embedded {report.embedded}")
    return 0
