"""The `ragopt` command: thin parsing and printing over the library.

Each subcommand lives in its own module with `register(subparsers)` and `run(args) -> int`; heavy
libraries are imported inside `run`, so `ragopt --help` stays instant. Bad input exits 2 with one line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ragopt.errors import BackendError, InputError, Refused

SUBCOMMANDS = ["index", "search", "eval", "sweep", "judge", "stages", "export", "ask", "capacity", "serve", "loadtest", "train_embedder",
               "train_reranker", "synth"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragopt", description="Compose, trace and tune RAG pipelines.")
    parser.add_argument("--workspace", default=None, help="where indexes and caches live (default: $RAGOPT_HOME or ./.ragopt)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"ragopt.cli.{name}")
        sub = module.register(subparsers)
        sub.set_defaults(handler=module.run)
    return parser


def quiet_model_loading(args: argparse.Namespace) -> None:
    """A run without progress bars (--no-progress, --json, or stderr not a terminal) gets none from the model
    libraries either: transformers draws "Loading weights: 100%|...|" when a model loads and huggingface_hub
    one per download. huggingface_hub's switch, HF_HUB_DISABLE_PROGRESS_BARS, covers both: transformers reads it
    when it is imported, which is later, in the command (heavy imports are lazy), and child processes (Ray
    workers, servers) inherit it."""
    if getattr(args, "no_progress", False) or getattr(args, "json", False) or not sys.stderr.isatty():
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


def check_folder_settings(args: argparse.Namespace) -> None:
    """The folders every command may write to, checked before its work starts."""
    from ragopt.workspace import check_folder_setting, workspace_root

    check_folder_setting(workspace_root(args.workspace),
                         "$RAGOPT_HOME" if not args.workspace and os.environ.get("RAGOPT_HOME") else "--workspace")
    if os.environ.get("RAGOPT_MODEL_CACHE"):
        check_folder_setting(os.environ["RAGOPT_MODEL_CACHE"], "$RAGOPT_MODEL_CACHE")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    quiet_model_loading(args)
    try:
        check_folder_settings(args)
        return int(args.handler(args) or 0)
    except InputError as exc:
        print(f"ragopt {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (Refused, BackendError) as exc:  # refused under load or a model/server failed: one line too
        print(f"ragopt {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"ragopt {args.command}: interrupted; re-run the same command to pick up where it stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
