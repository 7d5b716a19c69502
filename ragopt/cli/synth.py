"""`ragopt synth`: generate an evaluation set from your own documents (see ragopt/synth)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ragopt.cli import _common


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "synth", help="generate an evaluation set (questions, evidence spans, answers) from your documents",
        description="Writes SET/corpus.jsonl, SET/questions.jsonl (a ragopt set: `ragopt sweep --dataset SET` takes it) "
                    "and SET/synth.json (generator, model, prompt version, seed, filters, what each filter dropped). "
                    "The same seed gives the same questions; a killed run re-run finishes with the same result.",
    )
    _common.add_docs_args(p, required=True)
    p.add_argument("--out", required=True, metavar="SET", help="the folder to write (replaced if it holds a generated set)")
    p.add_argument("--questions", type=int, default=100, help="questions to keep (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--generator", choices=["extractive"], default="extractive",
                   help="extractive: no LLM (key words of a sentence, partly said in other words)")
    p.add_argument("--round-trip", choices=["dense", "bm25", "hybrid", "off"], default="hybrid",
                   help="keep a question only when this retriever finds its document in --round-trip-k (recorded in synth.json)")
    p.add_argument("--round-trip-k", type=int, default=20)
    p.add_argument("--per-document-cap", type=int, default=2, help="at most this many questions per source file or document")
    p.add_argument("--json", action="store_true", help="print synth.json's record on stdout")
    return p


def synth_config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from ragopt.synth import RoundTripConfig, SynthConfig

    rt = _common.from_flags(RoundTripConfig, {"top_k": "--round-trip-k", "retriever": "--round-trip"},
                            enabled=args.round_trip != "off", top_k=args.round_trip_k,
                            retriever="hybrid" if args.round_trip == "off" else args.round_trip)
    flags = {"questions": "--questions", "seed": "--seed", "per_document_cap": "--per-document-cap"}
    return _common.from_flags(SynthConfig, flags, questions=args.questions, seed=args.seed, generator=args.generator,
                              per_document_cap=args.per_document_cap, round_trip=rt)


def summary(record: dict, out: str) -> str:  # type: ignore[type-arg]
    counts = record["counts"]
    dropped = ", ".join(f"{k} {v}" for k, v in counts["dropped"].items())
    rt = record["filters"]["round_trip"]
    trip = f"round trip {rt['retriever']}@{rt['top_k']}" if rt["enabled"] else "no round trip"
    short = f" (short of {record['short_by']}: the documents gave no more)" if record.get("short_by") else ""
    return (f"generated {counts['kept']} questions{short} from {record['documents']} documents with the {record['generator']} "
            f"generator (seed {record['seed']}, {trip}) -> {out}; {counts['candidates']} candidates, dropped: {dropped}")


def run(args: argparse.Namespace) -> int:
    from ragopt.synth.generate import check_out, synthesize, write_set

    config = synth_config(args)
    out = Path(args.out)
    check_out(out)
    documents = _common.documents(args)
    evalset, record = synthesize(documents, config, _common.workspace(args), name=out.name, source=args.docs,
                                 progress=sys.stderr.isatty())
    write_set(evalset, record, out)
    print(summary(record, str(out)), file=sys.stderr)
    if args.json:
        print(json.dumps(record))
    return 0
