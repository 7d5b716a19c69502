"""`ragopt search`: one query against a dataset's index, with the trace of every stage."""

from __future__ import annotations

import argparse
import json

from ragopt.cli import _common


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("search", help="run one query and show hits and per-stage timings")
    _common.add_dataset_args(p)
    _common.add_chunking_args(p)
    _common.add_retriever_args(p)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--tenant", default=None)
    p.add_argument("--scope", action="append", default=[], help="a permission scope of the asker (repeatable)")
    p.add_argument(
        "--json", action="store_true",
        help="print one JSON object: the hits (rank, chunk_id, doc_id, start, end, score) and the trace",
    )
    p.add_argument("query")
    return p


def run(args: argparse.Namespace) -> int:
    from ragopt.config import needs_vectors
    from ragopt.pipeline import Pipeline
    from ragopt.plan import retrieval_stages
    from ragopt.types import Query

    _common.validate_retrieval_flags(args, args.top_k)
    documents = _common.documents(args, progress=not args.json)
    config = _common.choose_retriever(args, documents, args.top_k)
    report, embedder = _common.build(args, documents, progress=not args.json, dense=needs_vectors(config.retriever))
    stages = retrieval_stages(report.index, embedder, config)
    result = Pipeline(stages).run(Query(text=args.query, tenant=args.tenant, scopes=args.scope))
    if args.json:
        hits = [
            {"rank": h.rank, "chunk_id": h.chunk.id, "doc_id": h.chunk.doc_id, "start": h.chunk.start,
             "end": h.chunk.end, "score": h.score}
            for h in result.hits
        ]
        print(json.dumps({"query": args.query, "hits": hits, "trace": result.trace.model_dump(mode="json")}))
        return 0
    for h in result.hits:
        snippet = " ".join(h.chunk.text.split())[:100]
        print(f"{h.rank:>3}  {h.score:8.4f}  {h.chunk.doc_id:<24} [{h.chunk.start}:{h.chunk.end}]  {snippet}")
    print()
    for s in result.trace.spans:
        hits = f"  cache {s.usage.cache_hits}/{s.usage.cache_hits + s.usage.cache_misses}" if s.usage.cache_hits + s.usage.cache_misses else ""
        print(f"  {s.name:<8} {s.ms:8.2f} ms  in {s.items_in:>4}  out {s.items_out:>4}{hits}")
    print(f"  {'total':<8} {result.trace.total_ms:8.2f} ms")
    return 0
