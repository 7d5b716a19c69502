#!/usr/bin/env python3
"""Query rewrite on the shipped set: recall@5 of follow-up questions, and of all other questions, per rewrite mode.

    python benchmarks/bench_rewrite.py [--dataset DIR (default: the shipped set)] [--followups FILE] [--workspace DIR]
                                       [--model PATH.gguf] [--threads 1] [--glossary FILE] [--json]

Retrieval is the main job's hybrid configuration: 64-token chunks (overlap 16), MiniLM + BM25 fused with RRF,
deep enough for about 5 distinct documents (`ragopt.eval.runner.chunk_depth`). The same retrieval runs after
each rewrite mode: off (the baseline of the ratios), rules, llm (SmolLM2 by default, 1 thread; it only runs for
follow-ups) and multi (rules plus query variants fused with RRF). Three groups of questions: the shipped set's
follow-ups (questions with a conversation history; 8 in two shapes), the added follow-ups over the same corpus
(the shipped set's followups.jsonl: 30 in five shapes, where the pronoun points at the user's entity or at the
one the answer named), and the shipped set's other questions, which show that rewriting does not hurt questions
that stand alone. Recall@5 is document-level (ragopt.eval.metrics). The rewrite's own time is the p50 of its span.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig  # noqa: E402
from ragopt.data import EvalQuery, EvalSet, load_evalset  # noqa: E402
from ragopt.errors import InputError  # noqa: E402
from ragopt.eval.metrics import doc_ranking, mean, recall_at_k  # noqa: E402
from ragopt.eval.runner import chunk_depth  # noqa: E402
from ragopt.index import build_index, make_embedder  # noqa: E402
from ragopt.pipeline import Pipeline  # noqa: E402
from ragopt.plan import retrieval_stages  # noqa: E402
from ragopt.shipped import shipped_dataset  # noqa: E402
from ragopt.stages.generate_llama import GeneratorConfig  # noqa: E402
from ragopt.stages.rewrite import with_rewrite  # noqa: E402
from ragopt.stages.rewrite import QueryRewrite, RewriteConfig  # noqa: E402
from ragopt.trace import percentiles  # noqa: E402
from ragopt.workspace import workspace_dir  # noqa: E402

MODES = ("off", "rules", "llm", "multi")
GROUPS = ("follow_up", "added_follow_up", "other")
K = 5


def run_mode(mode: str, args: argparse.Namespace, retrieval: list, queries: list[tuple[str, EvalQuery]]) -> dict:
    from tqdm import tqdm

    llm = GeneratorConfig(model=args.model, n_ctx=1536, max_tokens=48, n_threads=args.threads)
    rewriter = QueryRewrite(RewriteConfig(mode=mode, glossary=args.glossary, llm=llm))
    pipeline = Pipeline(with_rewrite(rewriter, retrieval))
    rows = []
    for group, q in tqdm(queries, desc=f"rewrite {mode}", leave=False, disable=args.json):
        result = pipeline.run(q.query)
        attrs = next((s.usage.attrs for s in result.trace.spans if "rewrite" in s.usage.attrs), {})
        span = next((s for s in result.trace.spans if s.name in ("rewrite", "multi_retrieve")), None)
        ranking = doc_ranking(h.chunk.doc_id for h in result.hits)
        rows.append({
            "id": q.query.id,
            "group": group,
            "recall": recall_at_k(ranking, q.relevance, K),
            "text": result.state.query.text,
            "rule": attrs.get("rewrite", "off"),
            "llm_rejected": attrs.get("llm_rejected"),
            "ms": span.ms if span is not None and span.name == "rewrite" else None,
        })
    follow = [r for r in rows if r["group"] != "other"]
    rewrite_ms = [r["ms"] for r in follow if r["ms"] is not None]
    return {f"{g}_recall@5": mean(r["recall"] for r in rows if r["group"] == g) for g in GROUPS} | {
        "llm_chose": sum(":llm" in r["rule"] for r in follow),
        "llm_rejected": sum(r["llm_rejected"] is not None for r in follow),
        "follow_up_rewrite_ms_p50": percentiles(rewrite_ms)["p50"] if rewrite_ms else None,
        "changed_other": sum(r["rule"] not in ("none", "off") for r in rows if r["group"] == "other"),
        "rows": rows,
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=shipped_dataset())
    ap.add_argument("--followups", type=Path, default=shipped_dataset() / "followups.jsonl",
                    help="more follow-up questions over the same corpus ('' for none)")
    ap.add_argument("--workspace", default=None, help="where the index and caches live (default: ./.ragopt)")
    ap.add_argument("--model", default=None, help="GGUF for mode llm (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads (default 1)")
    ap.add_argument("--glossary", default=None, help="an abbreviation glossary for the rewrite")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    return ap.parse_args()


def load_questions(args: argparse.Namespace) -> tuple[EvalSet, list[tuple[str, EvalQuery]]] | None:
    """The shipped set and every question with its group; None (said on stderr) when an input is unusable or
    there is no follow-up question at all."""
    try:
        evalset = load_evalset(args.dataset)
        added = load_evalset(args.followups).queries if str(args.followups) not in ("", ".") else []
        QueryRewrite(RewriteConfig(mode="llm", glossary=args.glossary, llm=GeneratorConfig(model=args.model)))  # inputs, early
    except InputError as exc:
        print(f"bench_rewrite: {exc}", file=sys.stderr)
        return None
    queries = [("follow_up" if q.query.history else "other", q) for q in evalset.queries] + [("added_follow_up", q) for q in added]
    if all(group == "other" for group, _ in queries):
        print(f"bench_rewrite: {args.dataset} has no questions with a conversation history", file=sys.stderr)
        return None
    return evalset, queries


def summarize(results: dict[str, dict], args: argparse.Namespace, counts: dict[str, int], depth: int) -> dict[str, Any]:
    """Each mode's figures with their ratios to mode off, and every follow-up's rewrite in each mode."""
    base = results["off"]

    def ratio(mode: str, key: str) -> float | None:
        b, v = base[key], results[mode][key]
        return None if not b or v is None else v / b

    return {
        "dataset": str(args.dataset),
        "followups": str(args.followups),
        "retrieval": f"hybrid rrf, 64/16 chunks, depth {depth} chunks",
        "questions": counts,
        "modes": {
            mode: {k: v for k, v in r.items() if k != "rows"} | {f"{g}_ratio": ratio(mode, f"{g}_recall@5") for g in GROUPS}
            for mode, r in results.items()
        },
        "follow_up_rewrites": {
            row["id"]: {mode: results[mode]["rows"][i]["text"] for mode in MODES}
            for i, row in enumerate(base["rows"]) if row["group"] != "other"
        },
    }


def print_table(summary: dict[str, Any]) -> None:
    counts = summary["questions"]
    n_follow = counts["follow_up"] + counts["added_follow_up"]
    print(f"{summary['dataset']}: {counts['follow_up']} follow-ups, {counts['other']} other questions; "
          f"{summary['followups']}: {counts['added_follow_up']} follow-ups; {summary['retrieval']}")
    print(f"recall@5 (x = ratio to off)   {'shipped follow-ups':>20} {'added follow-ups':>18} {'other questions':>17} {'rewrite p50 ms':>15}")
    for mode, m in summary["modes"].items():
        ms = "-" if m["follow_up_rewrite_ms_p50"] is None else f"{m['follow_up_rewrite_ms_p50']:.1f}"
        cells = "".join(f" {_cell(m[f'{g}_recall@5'], m[f'{g}_ratio']):>{w}}" for g, w in zip(GROUPS, (20, 18, 17)))
        print(f"{mode:<29}{cells} {ms:>15}")
    llm, rules, multi = (summary["modes"][m] for m in ("llm", "rules", "multi"))
    print(f"other questions changed by the rewrite: rules {rules['changed_other']}, multi {multi['changed_other']}; "
          f"LLM chose the referent for {llm['llm_chose']}/{n_follow} follow-ups ({llm['llm_rejected']} answers rejected)")
    print("\nfollow-up rewrites:")
    for qid, texts in summary["follow_up_rewrites"].items():
        print(f"  {qid}")
        for mode in MODES[1:]:
            print(f"    {mode:<5} {texts[mode]}")


def main() -> int:
    args = parse_args()
    loaded = load_questions(args)
    if loaded is None:
        return 2
    evalset, queries = loaded
    counts = {g: sum(group == g for group, _ in queries) for g in GROUPS}
    ws = workspace_dir(args.workspace)
    embedder = make_embedder(ws, EmbedderConfig(threads=1))
    index = build_index(evalset.documents, ChunkerConfig(chunker="tokens", size=64, overlap=16), embedder, ws,
                        progress=not args.json).index
    depth = chunk_depth(index, K)
    retrieval = retrieval_stages(index, embedder, RetrievalConfig(retriever="hybrid", top_k=depth))

    results = {}
    for mode in MODES:
        results[mode] = run_mode(mode, args, retrieval, queries)
        if not args.json:
            print(f"  {mode}: done", file=sys.stderr)
    summary = summarize(results, args, counts, depth)
    if args.json:
        print(json.dumps(summary))
    else:
        print_table(summary)
    return 0


def _cell(value: float | None, ratio: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f} (x{ratio:.2f})" if ratio is not None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
