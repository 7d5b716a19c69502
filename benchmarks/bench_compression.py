"""How much gold evidence prompt compression keeps: SciFact rationale sentences and CMRC answer spans in a
compressed top-10 context.

SciFact (English): test claims whose metadata names rationale sentences (188 of 300) are answered by ragopt's
hybrid retrieval (BM25 + MiniLM, RRF) over whole abstracts. CMRC 2018 dev (Chinese): its 3,219 questions are
answered by BM25 (the chinese analyzer) over whole paragraphs; the gold span is the reference answer in its
paragraph. The top-10 context is compressed to 75%, 50% and 25% of its tokens, and the benchmark prints the
share of gold spans (of the gold documents that were retrieved) still in the context: a span counts as kept
when every word of it (in Chinese, every run of word characters) starts in a kept span. Each selection variant
is reported, beside the baseline measured in the same run: what a token budget does without compression,
dropping the lowest-ranked whole passages until the context fits. On CMRC only the BM25-scored variants run by
default: the one embedder that ships offline (MiniLM) reads English only (name others with --cmrc-variants).

Usage: python benchmarks/bench_compression.py [--datasets scifact,cmrc] [--dataset DIR] [--cmrc DIR] [--workspace DIR]
       [--tokenizer embedder|generator|GGUF] [--json]
The workspace keeps the index and the cached sentence embeddings, so a re-run is fast. Torch uses one thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[1]
SHARES = (0.75, 0.5, 0.25)
# name -> CompressConfig fields; the first is the stage's default and the one `retention` reports
VARIANTS: dict[str, dict[str, Any]] = {
    "embedder+passage0.7 by-score": {},  # the stage's defaults
    "embedder by-score": {"scorer": "embedder", "passage_weight": 0.0},
    "embedder best-first": {"scorer": "embedder", "passage_weight": 0.0, "best_first": True},
    "bm25 best-first": {"scorer": "bm25", "best_first": True},
    "bm25 by-score": {"scorer": "bm25"},
    "both best-first": {"scorer": "both", "passage_weight": 0.0, "best_first": True},
    "both by-score": {"scorer": "both", "passage_weight": 0.0},
    "embedder+passage0.3 best-first": {"passage_weight": 0.3, "best_first": True},
    "both+passage0.3 best-first": {"scorer": "both", "passage_weight": 0.3, "best_first": True},
    "both+passage0.5 by-score": {"scorer": "both", "passage_weight": 0.5},
    "both+passage0.7 by-score": {"scorer": "both", "passage_weight": 0.7},
}
_WORD = re.compile(r"\w+")


CMRC_VARIANTS = ("bm25 by-score", "bm25 best-first")


def default_dataset(name: str = "scifact") -> Path:
    for root in (REPO.parent, REPO.parents[1]):
        if (root / "shared" / "data" / name).is_dir():
            return root / "shared" / "data" / name
    return REPO.parent / "shared" / "data" / name


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


def retrieved_gold(queries: list[Any], contexts: list[list[Any]]) -> list[dict[str, list[tuple[int, int]]]]:
    """Per query: each retrieved gold document's gold spans (a gold document left out of the context cannot count)."""
    gold: list[dict[str, list[tuple[int, int]]]] = []
    for q, hits in zip(queries, contexts):
        retrieved = {h.chunk.doc_id for h in hits}
        spans: dict[str, list[tuple[int, int]]] = {}
        for e in q.evidence:
            if e.doc_id in retrieved:
                spans.setdefault(e.doc_id, []).append((e.start, e.end))
        gold.append(spans)
    return gold


def compress_contexts(stage: Any, queries: list[Any], contexts: list[list[Any]], desc: str) -> tuple[list[list[Any]], int]:
    """Every query's context through the compress stage: the compressed contexts and the tokens they kept in all."""
    from tqdm import tqdm

    from ragopt.pipeline import RequestState

    out, after = [], 0
    for q, hits in tqdm(list(zip(queries, contexts)), desc=desc, leave=False, file=sys.stderr):
        state = stage.run(RequestState(query=q.query, hits=list(hits)))
        out.append(state.hits)
        after += state.usage.attrs["tokens_after"]
    return out, after


def measure(name: str, evalset: Any, retrieval: Any, variants: dict[str, dict[str, Any]], counter: Any, workspace: str,
            say: Any) -> dict[str, Any]:
    """Retrieve the top-10 context of every query with gold spans, compress it each way, score what was kept."""
    from ragopt.config import ChunkerConfig, needs_vectors
    from ragopt.index import build_index, make_embedder
    from ragopt.pipeline import Pipeline
    from ragopt.plan import retrieval_stages
    from ragopt.stages.compress import CompressConfig, CompressPassages

    embedder = make_embedder(workspace)
    queries = [q for q in evalset.queries if q.evidence]
    docs = evalset.doc_map()
    say(f"{evalset.name}: {len(queries)} queries with gold spans; {retrieval.retriever} top-10; tokens by {counter.name}")
    index = build_index(evalset.documents, ChunkerConfig(chunker="whole"), embedder, workspace,
                        dense=needs_vectors(retrieval.retriever)).index
    pipeline = Pipeline(retrieval_stages(index, embedder, retrieval))
    contexts = [r.hits for r in pipeline.run_many([q.query for q in queries], progress=True)]

    gold = retrieved_gold(queries, contexts)
    n_gold = sum(len(s) for g in gold for s in g.values())
    say(f"gold spans in retrieved gold documents: {n_gold} (of {sum(len(q.evidence) for q in queries)})")

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
    results["baseline: drop lowest-ranked passages"] = {
        str(share): score([drop_lowest_ranked(hits, int(share * b), counter.count) for hits, b in zip(contexts, before)])
        for share in SHARES}
    for variant, fields in variants.items():
        row: dict[str, Any] = {}
        for share in SHARES:
            stage = CompressPassages(CompressConfig(budget=share, **fields), embedder=embedder, count_tokens=counter.count,
                                     analyzer=index.analyzer(retrieval.bm25))
            t0 = time.perf_counter()
            out, after = compress_contexts(stage, queries, contexts, f"{name} {variant} @ {share}")
            row[str(share)] = {**score(out), "token_share": after / sum(before), "ms_per_query": (time.perf_counter() - t0) * 1000 / len(queries)}
        results[variant] = row
    default = next(iter(variants))
    return {"dataset": evalset.name, "queries": len(queries), "gold_spans": n_gold, "variant": default,
            "retention": {str(s): results[default][str(s)]["micro"] for s in SHARES}, "variants": results}


def print_table(result: dict[str, Any]) -> None:
    results, base = result["variants"], result["variants"]["baseline: drop lowest-ranked passages"]
    print(f"\n{result['dataset']}: share of gold spans kept (micro over {result['gold_spans']} spans; macro = mean per query)")
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


def bad_input(message: str) -> NoReturn:
    """One line naming the flag or file, exit 2, as every ragopt command does with bad input."""
    print(f"bench_compression: {message}", file=sys.stderr)
    raise SystemExit(2)


def pick(names: str, flag: str) -> dict[str, dict[str, Any]]:
    try:
        return {name: VARIANTS[name] for name in names.split(",")}
    except KeyError as exc:
        bad_input(f"[{flag}]: unknown variant {exc}; known: {', '.join(VARIANTS)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="scifact,cmrc", help="which to run: scifact, cmrc or both (default)")
    parser.add_argument("--dataset", default=str(default_dataset()), help="the SciFact folder")
    parser.add_argument("--cmrc", default=str(default_dataset("cmrc2018_dev")), help="the CMRC 2018 dev folder")
    parser.add_argument("--workspace", default=str(Path(tempfile.gettempdir()) / "ragopt-bench-compression"))
    parser.add_argument("--tokenizer", default="embedder", help='"embedder", "generator" (SmolLM2) or a GGUF path')
    parser.add_argument("--variants", default=",".join(VARIANTS), help="SciFact, comma-separated names from: " + ", ".join(VARIANTS))
    parser.add_argument("--cmrc-variants", default=",".join(CMRC_VARIANTS), help="CMRC, names as for --variants")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args()
    chosen = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if not chosen or set(chosen) - {"scifact", "cmrc"}:
        bad_input(f"[--datasets]: scifact and/or cmrc, got {args.datasets!r}")
    variants = {"scifact": pick(args.variants, "--variants"), "cmrc": pick(args.cmrc_variants, "--cmrc-variants")}

    import torch

    torch.set_num_threads(1)
    from ragopt.config import EmbedderConfig, RetrievalConfig
    from ragopt.data import load_evalset
    from ragopt.errors import InputError
    from ragopt.tokencount import token_counter

    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    retrieval = {"scifact": RetrievalConfig(retriever="hybrid", top_k=10), "cmrc": RetrievalConfig(retriever="bm25", top_k=10)}
    try:
        counter = token_counter(args.tokenizer, EmbedderConfig())
        counter = dataclasses.replace(counter, tokenize=cache(counter.tokenize))  # a text is tokenized once per run
        evalsets = {d: load_evalset(args.dataset if d == "scifact" else args.cmrc, split="test") for d in chosen}
    except InputError as exc:
        bad_input(str(exc))
    out = {d: measure(d, evalsets[d], retrieval[d], variants[d], counter, args.workspace, say) for d in chosen}
    if args.json:
        print(json.dumps({"tokenizer": counter.name, **out}))
        return
    for result in out.values():
        print_table(result)


if __name__ == "__main__":
    main()
