"""What fitting prompts costs a sweep: CPU seconds to fit every shipped question's prompt (and its follow-ups'),
BM25 top K over the shipped corpus, with the main job's context tokenizer (the embedder's WordPiece), in two arms
measured in one run:
- joined: the fitted prompt's tokens are its lines' remembered token ids joined (ragopt's path when the
  tokenizer splits on whitespace);
- whole: the same renderer without remembered ids, so the fitted prompt is tokenized whole (the path a BPE
  vocabulary takes, and the embedder's before this path existed).
Each arm fits every prompt twice in one process: cold (nothing remembered) and warm (every line remembered, as
in a sweep's later trials). Both arms must give the same tokens; the script exits 1 if they do not.

Usage: python benchmarks/bench_prompt_fit.py [--top-k 20] [--budgets 8192,1500] [--chunk-size whole|N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def shipped_cases(chunk_size: int | None, top_k: int) -> list[tuple[Any, list[Any]]]:
    """The shipped set's questions and follow-ups, each with its BM25 top_k over the shipped corpus chunked by the
    embedder's tokens (None: whole documents). tests/stages/test_prompt.py fits the same prompts."""
    from ragopt.backends.bm25 import BM25Index
    from ragopt.chunking import Chunker
    from ragopt.config import BM25Config, ChunkerConfig
    from ragopt.data import load_evalset
    from ragopt.shipped import shipped_dataset
    from ragopt.types import Hit

    folder = shipped_dataset()
    evalset = load_evalset(folder)
    chunker = Chunker(ChunkerConfig(chunker="whole") if chunk_size is None else ChunkerConfig(chunker="tokens", size=chunk_size, overlap=16))
    chunks = chunker.chunk_all(evalset.documents)
    bm25 = BM25Index([c.indexed_text for c in chunks], BM25Config())
    cases = []
    for q in evalset.queries + load_evalset(folder / "followups.jsonl").queries:
        found = bm25.search(q.query.text, top_k)
        cases.append((q.query, [Hit(chunk=chunks[i], score=s, rank=r, retriever="bm25") for r, (i, s) in enumerate(found, 1)]))
    return cases


def measure(arm: str, parts: list[Any], budget: int) -> tuple[dict[str, Any], list[list[int]]]:
    """One arm's CPU seconds (cold, then warm) and the fitted prompts' tokens."""
    from ragopt.config import EmbedderConfig
    from ragopt.stages.prompt import CountingRenderer, fit_prompt
    from ragopt.tokencount import token_counter

    renderer = CountingRenderer(token_counter("embedder", EmbedderConfig()))
    if arm == "whole":
        del renderer.ids
    out: dict[str, Any] = {"arm": arm, "budget": budget, "prompts": len(parts)}
    for phase in ("cold", "warm"):
        t0 = time.process_time()
        tokens = [fit_prompt(p, renderer, budget).tokens for p in parts]
        out[f"{phase}_cpu_s"] = round(time.process_time() - t0, 3)
    out["tokens"] = sum(map(len, tokens))
    return out, tokens


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--budgets", default="8192,1500", help="comma-separated token budgets (8,192: the main job's)")
    p.add_argument("--chunk-size", default="whole", help="'whole' documents or a chunk size in tokens")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    try:
        budgets = [int(b) for b in args.budgets.split(",")]
        chunk_size = None if args.chunk_size == "whole" else int(args.chunk_size)
    except ValueError:
        p.error("--budgets takes integers, --chunk-size 'whole' or an integer")
    from ragopt.stages.prompt import PromptConfig, prompt_parts

    parts = [prompt_parts(query, hits, PromptConfig()) for query, hits in shipped_cases(chunk_size, args.top_k)]
    rows, same = [], True
    for budget in budgets:
        (joined, joined_tokens), (whole, whole_tokens) = measure("joined", parts, budget), measure("whole", parts, budget)
        same &= joined_tokens == whole_tokens
        rows += [joined, whole]
        for phase in ("cold", "warm"):
            joined[f"{phase}_ratio_to_whole"] = round(joined[f"{phase}_cpu_s"] / max(whole[f"{phase}_cpu_s"], 1e-9), 3)
    report = {"top_k": args.top_k, "chunk_size": args.chunk_size, "rows": rows, "same_tokens": same,
              "load_avg_1m": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(report))
    else:
        for r in rows:
            ratios = f"  (cold {r['cold_ratio_to_whole']}x, warm {r['warm_ratio_to_whole']}x of whole)" if r["arm"] == "joined" else ""
            print(f"budget {r['budget']:>5} {r['arm']:<6} {r['prompts']} prompts: cold {r['cold_cpu_s']:.2f} s, "
                  f"warm {r['warm_cpu_s']:.2f} s CPU, {r['tokens']} tokens{ratios}")
        print(f"same tokens in both arms: {same}; load average {report['load_avg_1m']}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
