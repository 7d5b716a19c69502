"""`ragopt eval`: retrieval quality and latency of one configuration on an evaluation set."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ragopt.cli import _common, _observe

METRICS = ["ndcg@10", "recall@10", "recall@100", "mrr@10"]
CHARS_METRICS = [f"{m}@{k}" for k in (5, 10) for m in ("chars_recall", "chars_precision", "chars_iou")]  # with spans
DOCS_PER_QUERY = 100


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("eval", help="nDCG@10, Recall@10/100, MRR@10 and latency of one retriever")
    _common.add_dataset_args(p)
    _common.add_chunking_args(p)
    _common.add_retriever_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--save-run", metavar="FILE", help="write the ranking in TREC run format (100 docs per query)")
    p.add_argument("--traces", metavar="FILE", help="write every query's trace as JSON lines")
    p.add_argument("--save-contexts", metavar="FILE",
                   help='write what reached each prompt: a JSON line per question, {"id", "contexts": [{"doc_id", '
                        '"start", "end"}, ...]} in prompt order (the retrieval depth: the first K are a K-passage prompt)')
    _observe.add_trace_args(p)
    return p


def run(args: argparse.Namespace) -> int:
    from ragopt.config import needs_vectors
    from ragopt.data import generated_note, load_evalset
    from ragopt.eval.metrics import mean
    from ragopt.eval.runner import chunk_depth, run_queries
    from ragopt.eval.scoring import rank_scores
    from ragopt.trace import percentiles

    _common.validate_retrieval_flags(args)
    _common.output_file(args.save_run, "--save-run")
    _common.output_file(args.traces, "--traces")
    _common.output_file(args.save_contexts, "--save-contexts")
    _common.docs_options(args)
    tracing = _observe.tracing(args, "eval")
    dataset = str(_common.generated_set(args, progress=not args.json)) if args.docs else args.dataset
    evalset = load_evalset(dataset, split=args.split)
    config = _common.choose_retriever(args, evalset.documents)
    report, embedder = _common.build(args, evalset.documents, progress=not args.json, dense=needs_vectors(config.retriever))
    depth = chunk_depth(report.index, DOCS_PER_QUERY)
    runs = run_queries(evalset, report.index, embedder, config, depth, progress=sys.stderr.isatty(), workspace=_common.workspace(args))
    spans = any(e.start is not None for q in evalset.queries for e in q.evidence)
    per_query = rank_scores(runs, evalset, METRICS + (CHARS_METRICS if spans else []))
    metrics = {name: mean(values) for name, values in per_query.items()}
    stages = list(dict.fromkeys(s for r in runs for s in r.stage_ms))  # in pipeline order
    # a query's latency is the sum of its stages' spans, as in a sweep (ragopt.eval.executor)
    summary = {"total": percentiles(r.ms for r in runs), **{s: percentiles(r.stage_ms[s] for r in runs if s in r.stage_ms) for s in stages}}
    tag = f"ragopt-{config.retriever}" + (f"-{config.fusion.method}" if config.retriever == "hybrid" else "")
    _write_outputs(args, runs, tag, tracing, evalset)
    out = {
        "dataset": evalset.name,
        "generated": generated_note(evalset.source),
        "retriever": config.retriever,
        "fusion": config.fusion.method if config.retriever == "hybrid" else None,
        "chunker": report.index.manifest.chunker.label,
        "index": report.index.manifest.id,
        "n_queries": len(runs),
        "metrics": metrics,
        "context_tokens": mean(r.prompt_tokens for r in runs),
        "latency_ms": {k: summary["total"][k] for k in ("p50", "p95", "p99")},
        "stages_ms": {name: {k: s[k] for k in ("p50", "p95", "p99")} for name, s in summary.items() if name != "total"},
    }
    if args.json:
        print(json.dumps(out))
        return 0
    _print_table(out, tag, spans)
    return 0


def _write_outputs(args: argparse.Namespace, runs: list, tag: str, tracing: Any, evalset: Any) -> None:
    """The files and traces the flags ask for: --save-run (TREC), --save-contexts, --traces, OTLP export."""
    from ragopt.eval.runner import best_per_doc, write_contexts, write_trec
    from ragopt.trace import write_jsonl

    if args.save_run:
        write_trec(args.save_run, tag, (
            (r.query_id, best_per_doc(((doc, score) for _, doc, _, _, score in r.ranking), DOCS_PER_QUERY)) for r in runs))
    if args.save_contexts:
        write_contexts(args.save_contexts, ((r.query_id, r.ranking) for r in runs))
    if args.traces:
        write_jsonl((r.trace for r in runs), args.traces)
    if tracing is not None:
        _observe.export_queries(tracing, [r.trace for r in runs], "eval", {q.query.id: q.query.text for q in evalset.queries})


def _print_table(out: dict[str, Any], tag: str, spans: bool) -> None:
    metrics = out["metrics"]
    print(f"{out['dataset']}  retriever={tag}  chunks={out['chunker']}  queries={out['n_queries']}")
    if out["generated"]:
        print(f"  figures from a generated set: {out['generated']}")
    print("  " + "  ".join(f"{m:>10}" for m in METRICS))
    print("  " + "  ".join(f"{metrics[m]:>10.4f}" for m in METRICS))
    if spans:  # Chroma's character metrics of the first K passages
        print("  " + "  ".join(f"{m}={metrics[m]:.4f}" for m in CHARS_METRICS))
    lat = out["latency_ms"]
    print(f"  latency per query (sum of its stages): p50 {lat['p50']:.2f} ms  p95 {lat['p95']:.2f} ms  p99 {lat['p99']:.2f} ms")
    print(f"  context tokens (fitted prompt, mean): {out['context_tokens']:.0f}")
    for name, s in out["stages_ms"].items():
        print(f"    {name:<8} p50 {s['p50']:.2f} ms  p95 {s['p95']:.2f} ms  p99 {s['p99']:.2f} ms")
