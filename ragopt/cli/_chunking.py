"""The chunking flags of index, eval, ask and serve, and the chunker they name."""

from __future__ import annotations

import argparse
from typing import Any

from ragopt.cli._flags import from_flags
from ragopt.config import CHUNKERS, HEADERS, ChunkerConfig, chunker_knobs
from ragopt.errors import InputError


def add_chunker_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--chunk-size", type=int, help="max tokens per chunk (default: whole documents)")
    g.add_argument("--whole-docs", action="store_true", help="one chunk per document (title + text); the default")
    p.add_argument("--chunker", metavar="|".join(CHUNKERS), default=None,  # checked by ChunkerConfig: one line
                   help="how documents are cut (docs/chunking.md): tokens (the default with --chunk-size), recursive "
                        "(headings, paragraphs, lines, sentences, words), semantic (where neighbouring sentences' "
                        "embeddings part), whole (the default)")
    p.add_argument("--chunk-overlap", type=int, default=0, help="tokens shared by neighbouring chunks")
    p.add_argument("--chunk-headers", metavar="|".join(HEADERS), default=None,
                   help="what the retrievers read before each chunk: none, title (the default) or path (its heading path)")
    p.add_argument("--chunker-set", action="append", default=[], metavar="KNOB=VALUE",
                   help="another knob of the chunker, e.g. percentile=95 or min_size=16 (repeatable; docs/chunking.md)")


def chunking_given(args: argparse.Namespace) -> bool:
    """Whether any chunking flag was given."""
    given = [args.chunker, args.chunk_size is not None, args.whole_docs, args.chunk_overlap, args.chunk_headers, args.chunker_set]
    return any(given)  # each flag read: `_common._plan_flags` learns the plan flags from what is read


def chunker_config(args: argparse.Namespace, default: ChunkerConfig | None = None) -> ChunkerConfig:
    """The chunker the flags name: --chunker (tokens when only --chunk-size is given, else whole documents) with
    its knobs from --chunk-size, --chunk-overlap, --chunk-headers and --chunker-set KNOB=VALUE; `default` when no
    chunking flag is given (`ask` and `serve`: ANSWER_CHUNKER)."""
    if default is not None and not chunking_given(args):
        return default
    name = args.chunker or ("whole" if args.whole_docs or args.chunk_size is None else "tokens")
    if args.whole_docs and name != "whole":
        raise InputError(f"--whole-docs is the whole chunker, not {name}", field="--whole-docs")
    if name == "whole" and args.chunk_overlap:
        raise InputError("an overlap needs --chunk-size (whole documents do not overlap)", field="--chunk-overlap")
    values: dict[str, Any] = {"chunker": name}
    flags = {"chunker": "--chunker", "size": "--chunk-size", "overlap": "--chunk-overlap", "headers": "--chunk-headers",
             "": "--chunk-overlap"}
    for assignment in args.chunker_set:
        knob, sep, raw = assignment.partition("=")
        if not (sep and knob and raw):
            raise InputError(f"expected KNOB=VALUE, got {assignment!r}", field="--chunker-set")
        if knob not in ChunkerConfig.model_fields:  # pydantic would say only "Extra inputs are not permitted"
            raise InputError(f"unknown knob {knob!r} of the {name} chunker (its knobs: "
                             f"{', '.join(chunker_knobs(name)) or 'none'}), got {raw!r}", field="--chunker-set")
        values[knob], flags[knob] = raw, "--chunker-set"
    given = {"size": args.chunk_size, "overlap": args.chunk_overlap or None, "headers": args.chunk_headers}
    values.update({k: v for k, v in given.items() if v is not None})
    try:
        return from_flags(ChunkerConfig, flags, **values)
    except InputError as exc:  # a knob of another chunker: the message names it as chunker.KNOB, blame its flag
        if not exc.message.startswith("chunker."):
            raise
        knob = exc.message.split(":", 1)[0].removeprefix("chunker.")
        raise InputError(exc.message.split(": ", 1)[1], field=flags.get(knob, "--chunker-set")) from None
