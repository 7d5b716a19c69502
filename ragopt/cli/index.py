"""`ragopt index`: build (or reuse) the index of a dataset's corpus or of your own documents (--docs); with
`--executor ray`, its texts embedded as Ray tasks on every node of a cluster, the index written here."""

from __future__ import annotations

import argparse
from contextlib import nullcontext

from ragopt.cli import _common

EXECUTORS = ("local", "ray")


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("index", help="chunk, embed and index a corpus (a no-op when it exists)")
    _common.add_dataset_args(p)
    _common.add_chunking_args(p)
    p.add_argument("--executor", metavar="|".join(EXECUTORS), default="local",  # checked in run: one line
                   help="local (default: embed in this process) or ray (embedding batches as Ray tasks on every node, "
                        "the index written here; pip install 'ragopt[ray]'; docs/speed.md)")
    p.add_argument("--address", "--ray-address", dest="address", metavar="ADDR",
                   help="with --executor ray: the Ray cluster, e.g. ray://HEAD:10001, HEAD:6379, or auto on a node of one "
                        "started with `ray start` (default: a new local Ray instance)")
    return p


def _check_executor(args: argparse.Namespace) -> bool:
    """Whether the build runs on Ray; an unknown executor, an address without it or Ray not installed: one line."""
    from ragopt.backends.ray_cluster import require_ray
    from ragopt.errors import InputError

    if args.executor not in EXECUTORS:
        raise InputError(f"expected one of {', '.join(EXECUTORS)}, got {args.executor!r}", field="--executor")
    if args.address is not None and args.executor != "ray":
        raise InputError("a Ray address needs --executor ray", field="--address")
    if args.executor == "ray":
        require_ray(field="--executor")
    return args.executor == "ray"


def run(args: argparse.Namespace) -> int:
    _common.chunker_config(args)  # flags first: nothing is read before they are known to be valid
    _common.embedder_config(args)
    _common.store_config(args)
    on_ray = _check_executor(args)
    from ragopt.backends.ray_cluster import ray_session

    with ray_session(args.address, field="--address") if on_ray else nullcontext() as ray:  # connected before any work
        report, _ = _common.build(args, _common.documents(args), ray=ray)
    print(f"index {report.index.manifest.id} at {report.index.path}  time {report.seconds:.2f} s  embedded {report.embedded}")
    return 0
