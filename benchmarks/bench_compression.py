"""How much gold evidence prompt compression keeps: SciFact rationale sentences in a compressed top-10 context.

SciFact test claims whose metadata names rationale sentences (188 of 300) are answered by ragopt's hybrid
retrieval (BM25 + MiniLM, RRF) over whole abstracts; the top-10 context is compressed to 75%, 50% and 25% of
its tokens, and the benchmark prints the share of gold rationale sentences (of the gold documents that were
retrieved) still in the context: a sentence counts as kept when every word of it is in a kept span. Each
selection variant is reported, beside the baseline measured in the same run: what a token budget does
without compression, dropping the lowest-ranked whole passages until the context fits.

Usage: python benchmarks/bench_compression.py [--dataset DIR] [--workspace DIR] [--tokenizer embedder|generator|GGUF] [--json]
The workspace keeps the index and the cached sentence embeddings, so a re-run is fast. Torch uses one thread.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARES = (0.75, 0.5, 0.25)
# name -> CompressConfig fields; the first is the stage's default and the one `retention` reports
VARIANTS: dict[str, dict[str, Any]] = {
    "embedder+passage0.7 by-score": {},  # the stage's defaults
    "embedder by-score": {"scorer": "embedder", "passage_weight": 0.0},
    "embedder best-first": {"scorer": "embedder", "passage_weight": 0.0, "best_first": True},
    "bm25 best-first": {"scorer": "bm25", "best_first": True},
    "both best-first": {"scorer": "both", "passage_weight": 0.0, "best_first": True},
    "both by-score": {"scorer": "both", "passage_weight": 0.0},
    "embedder+passage0.3 best-first": {"passage_weight": 0.3, "best_first": True},
    "both+passage0.3 best-first": {"scorer": "both", "passage_weight": 0.3, "best_first": True},
    "both+passage0.5 by-score": {"scorer": "both", "passage_weight": 0.5},
    "both+passage0.7 by-score": {"scorer": "both", "passage_weight": 0.7},
}
_WORD = re.compile(r"\w+")


def default_dataset() -> Path:
    for root in (REPO.parent, REPO.parents[1]):
        if (root / "shared" / "data" / "scifact").is_dir():
            return root / "shared" / "data" / "scifact"
    return REPO.parent / "shared" / "data" / "scifact"


def kept_share(gold: list[tuple[int, int]], text: str, kept: list[list[int]]) -> int:
    """How many gold spans of one document have every word inside the kept spans."""
    covered = bytearray(len(text))
    for s, e in kept:
        covered[s:e] = b"\x01" * (e - s)
    return sum(all(covered[m.start() + s] for m in _WORD.finditer(text[s:e])) for s, e in gold)


def drop_lowest_ranked(hits: list[Any], budget: int, count: Any) -> list[Any]:
    """The baseline: whole passages in rank order while they fit, as a prompt's token budget does."""
    out, used = [], 0
    for h in hits:
        n = count(h.chunk.text)
        if used + n > budget:
            break
        out.append(h.model_copy(update={"chunk": h.chunk.model_copy(update={"metadata": {"kept_spans": [[h.chunk.start, h.chunk.end]]}})}))
        used += n
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(default_dataset()))
    parser.add_argument("--workspace", default=str(Path(tempfile.gettempdir()) / "ragopt-bench-compression"))
    parser.add_argument("--tokenizer", default="embedder", help='"embedder", "generator" (SmolLM2) or a GGUF path')
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names from: " + ", ".join(VARIANTS))
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from tqdm import tqdm

    from ragopt.config import ChunkerConfig, RetrievalConfig
    from ragopt.data import load_evalset
    from ragopt.errors import InputError
    from ragopt.index import build_index, make_embedder
    from ragopt.pipeline import Pipeline, RequestState
    from ragopt.plan import retrieval_stages
    from ragopt.stages.compress import CompressConfig, CompressPassages
    from ragopt.tokencount import token_counter

    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    try:
        variants = {name: VARIANTS[name] for name in args.variants.split(",")}
    except KeyError as exc:
        raise SystemExit(f"[--variants]: unknown variant {exc}; known: {', '.join(VARIANTS)}") from None
    try:
        evalset = load_evalset(args.dataset, split="test")
        embedder = make_embedder(args.workspace)
        counter = token_counter(args.tokenizer, embedder.config)
    except InputError as exc:
        raise SystemExit(str(exc)) from None
    queries = [q for q in evalset.queries if q.evidence]
    docs = evalset.doc_map()
    say(f"{evalset.name}: {len(queries)} test claims with rationale sentences; tokens by {counter.name}")
    index = build_index(evalset.documents, ChunkerConfig(mode="whole"), embedder, args.workspace).index
    pipeline = Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever="hybrid", top_k=10)))
    contexts = [r.hits for r in pipeline.run_many([q.query for q in queries], progress=True)]

    gold: list[dict[str, list[tuple[int, int]]]] = []  # per query: retrieved gold doc -> rationale spans
    for q, hits in zip(queries, contexts):
        retrieved = {h.chunk.doc_id for h in hits}
        spans: dict[str, list[tuple[int, int]]] = {}
        for e in q.evidence:
            if e.doc_id in retrieved:
                spans.setdefault(e.doc_id, []).append((e.start, e.end))
        gold.append(spans)
    n_gold = sum(len(s) for g in gold for s in g.values())
    say(f"gold rationale sentences in retrieved gold abstracts: {n_gold} (of {sum(len(q.evidence) for q in queries)})")

    def score(compressed: list[list[Any]]) -> dict[str, float]:
        kept = 0
        per_query = []
        for spans, hits in zip(gold, compressed):
            k = 0
            for h in hits:
                if h.chunk.doc_id in spans:
                    k += kept_share(spans[h.chunk.doc_id], docs[h.chunk.doc_id].text, h.chunk.metadata.get("kept_spans", []))
            kept += k
            if spans:
                per_query.append(k / sum(len(s) for s in spans.values()))
        return {"micro": kept / n_gold if n_gold else 0.0, "macro": sum(per_query) / len(per_query) if per_query else 0.0}

    results: dict[str, dict[str, Any]] = {}
    before = [sum(counter.count(h.chunk.text) for h in hits) for hits in contexts]
    base: dict[str, Any] = {}
    for share in SHARES:
        out = [drop_lowest_ranked(hits, int(share * b), counter.count) for hits, b in zip(contexts, before)]
        base[str(share)] = score(out)
    results["baseline: drop lowest-ranked passages"] = base

    for name, fields in variants.items():
        row: dict[str, Any] = {}
        for share in SHARES:
            stage = CompressPassages(CompressConfig(budget=share, **fields), embedder=embedder, count_tokens=counter.count)
            out, after, t0 = [], 0, time.perf_counter()
            for q, hits in tqdm(list(zip(queries, contexts)), desc=f"{name} @ {share}", leave=False, file=sys.stderr):
                state = stage.run(RequestState(query=q.query, hits=list(hits)))
                out.append(state.hits)
                after += state.usage.attrs["tokens_after"]
            row[str(share)] = {**score(out), "token_share": after / sum(before), "ms_per_query": (time.perf_counter() - t0) * 1000 / len(queries)}
        results[name] = row

    default = next(iter(variants))
    if args.json:
        print(json.dumps({
            "dataset": evalset.name,
            "queries": len(queries),
            "gold_sentences": n_gold,
            "tokenizer": counter.name,
            "variant": default,
            "retention": {str(s): results[default][str(s)]["micro"] for s in SHARES},
            "variants": results,
        }))
        return
    print(f"\nshare of gold rationale sentences kept (micro over {n_gold} sentences; macro = mean per claim)")
    print(f"{'variant':40s}" + "".join(f"{'@' + str(s):>22s}" for s in SHARES))
    for name, row in results.items():
        cells = []
        for s in SHARES:
            r = row[str(s)]
            ratio = r["micro"] / base[str(s)]["micro"] if base[str(s)]["micro"] else float("nan")
            cells.append(f"{r['micro']:.3f} ({r['macro']:.3f}) x{ratio:.2f}")
        print(f"{name:40s}" + "".join(f"{c:>22s}" for c in cells))
    print("x = ratio to the baseline's micro figure at the same share")
    for name, row in results.items():
        if "token_share" in row[str(SHARES[0])]:
            print(f"{name:40s} tokens kept " + ", ".join(f"{row[str(s)]['token_share']:.3f}" for s in SHARES)
                  + "; ms/query " + ", ".join(f"{row[str(s)]['ms_per_query']:.1f}" for s in SHARES))


if __name__ == "__main__":
    main()
