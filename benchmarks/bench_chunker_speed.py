#!/usr/bin/env python3
"""Chunking speed: ragopt's recursive chunker against chonkie's RecursiveChunker, on the same text, in one run.

    python benchmarks/bench_chunker_speed.py [--dataset ../shared/data/chroma_chunking] [--sizes 128,256,512]
                                             [--rounds 5] [--json]

Both cut every document of the set's corpus (Chroma's three corpora by default: 0.2 MB) into chunks of at most
`size` MiniLM word pieces (ragopt: `ChunkerConfig(chunker="recursive", size=...)` counted with the embedder's
tokenizer.json; chonkie 1.7: `RecursiveChunker` with its default rules and the same tokenizer file), each chunker
timed over the whole corpus, the two alternating round by round so machine noise hits both alike, each round with
new chunkers (chonkie remembers the counts of texts it has seen: a second pass over the same text is 20x faster,
which no corpus is chunked for); printed: MB of
text per second (the median round), ragopt / chonkie, chunks and mean word pieces per chunk. `chunking_speed` is
the MB/s measure benchmarks/bench_chunking.py takes for any chunker.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "chroma_chunking"


def chunking_speed(cut: Callable[[Sequence[str]], Any], texts: Sequence[str], rounds: int = 5) -> list[float]:
    """MB of text per second `cut` (all texts in one call) cuts `texts` at, one figure per round."""
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        cut(texts)
        out.append(mb / (time.perf_counter() - t0))
    return out


def cutters(size: int) -> dict[str, tuple[Callable[[Sequence[str]], Any], Callable[[Any], list[str]]]]:
    """name -> (cut all texts, the chunk texts of what it returned)."""
    from chonkie import RecursiveChunker
    from tokenizers import Tokenizer

    from ragopt.chunking import Chunker
    from ragopt.config import ChunkerConfig
    from ragopt.types import Document

    ours = Chunker(ChunkerConfig(chunker="recursive", size=size))
    ours.tokenizer.counts(["loaded"])  # the tokenizer file read outside the timing, as chonkie's is
    tokenizer = Tokenizer.from_file(str(ours.tokenizer.file))
    tokenizer.no_truncation()  # MiniLM's tokenizer.json pads and truncates to 128: every text would count 128
    tokenizer.no_padding()
    theirs = RecursiveChunker(tokenizer=tokenizer, chunk_size=size)
    return {
        "ragopt": (lambda texts: ours.chunk_all(Document(id=str(i), text=t) for i, t in enumerate(texts)),
                   lambda chunks: [c.text for c in chunks]),
        "chonkie": (lambda texts: [theirs.chunk(t) for t in texts], lambda out: [c.text for cs in out for c in cs]),
    }


def measure(texts: list[str], size: int, rounds: int) -> dict[str, Any]:
    from ragopt.chunking import ChunkTokenizer

    count = ChunkTokenizer("embedder").ids
    speeds: dict[str, list[float]] = {}
    for _ in range(rounds):  # alternate: one round of each, then again; new chunkers each round (chonkie caches counts)
        for name, (cut, _) in cutters(size).items():
            speeds.setdefault(name, []).extend(chunking_speed(cut, texts, rounds=1))
    runs = cutters(size)
    row: dict[str, Any] = {"size": size}
    for name, (cut, texts_of) in runs.items():
        chunks = texts_of(cut(texts))
        row[name] = {"mb_per_s": statistics.median(speeds[name]), "chunks": len(chunks),
                     "mean_tokens": statistics.fmean(len(count(c)) for c in chunks),
                     "max_tokens": max(len(count(c)) for c in chunks)}
    row["ratio"] = row["ragopt"]["mb_per_s"] / row["chonkie"]["mb_per_s"]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DATA, help="an evaluation set whose corpus is cut (default: Chroma's)")
    ap.add_argument("--sizes", default="128,256,512", help="chunk sizes in MiniLM word pieces (default 128,256,512)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from ragopt.data import load_evalset
    from ragopt.errors import InputError

    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        if not sizes or min(sizes) < 1 or args.rounds < 1:
            raise ValueError
    except ValueError:
        print(f"bench_chunker_speed: error: [--sizes/--rounds]: positive integers, got {args.sizes!r}/{args.rounds}", file=sys.stderr)
        return 2
    try:
        texts = [d.text for d in load_evalset(args.dataset).documents]
    except InputError as exc:
        print(f"bench_chunker_speed: error: {exc}", file=sys.stderr)
        return 2
    rows = [measure(texts, size, args.rounds) for size in sizes]
    out = {"dataset": str(args.dataset), "mb": sum(len(t.encode("utf-8")) for t in texts) / 1e6, "rounds": args.rounds,
           "python": platform.python_version(), "rows": rows}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{out['mb']:.2f} MB of text, {len(texts)} documents; MB/s (median of {args.rounds} rounds), chunks, mean/max word pieces")
    for r in rows:
        print(f"size {r['size']:>4}: ragopt {r['ragopt']['mb_per_s']:6.2f} MB/s ({r['ragopt']['chunks']} chunks, "
              f"{r['ragopt']['mean_tokens']:.0f}/{r['ragopt']['max_tokens']})  chonkie {r['chonkie']['mb_per_s']:6.2f} MB/s "
              f"({r['chonkie']['chunks']} chunks, {r['chonkie']['mean_tokens']:.0f}/{r['chonkie']['max_tokens']})  "
              f"ragopt/chonkie {r['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
