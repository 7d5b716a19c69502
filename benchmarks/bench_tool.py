"""What a tool costs a request, and what its failure costs: request latency with the collection-status service
healthy, slow (delayed past the tool's timeout) and down (stopped), the real service every time.

    python benchmarks/bench_tool.py [--timeout-s 0.5] [--delay-s 1.5] [--healthy-delay-s 0] [--concurrency 1]
                                    [--questions 47] [--breaker-failures 3] [--json]

Each scenario answers the shipped hospital set's tool questions through one plan (BM25 over 64-token chunks, K=5,
the extractive answer, the tool stage with redaction and pruning), --concurrency requests in flight at once through
that one pipeline, as serve runs them (one thread each); the healthy service holds each answer --healthy-delay-s
(a service that takes its time but answers within the timeout). The breaker is the stage's own (--breaker-failures
failures in a row open it for 5 s; a large number keeps it closed, so every request meets the failing tool). Figures per scenario: p50 / p95 / max of the request's latency and of the tool's span, their
ratio to healthy (measured in the same run), the share of answers marked incomplete, the causes the traces name,
whether every request was answered, and whether every one finished within the timeout + 1 s. One request per
scenario is asked first and not counted (the tokenizer's loading, the first connection).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.errors import InputError  # noqa: E402
from ragopt.trace import percentiles  # noqa: E402


MAX_CONCURRENCY = 256  # serve's request threads (ragopt.serve.app.create_app's max_workers)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout-s", type=float, default=0.5, help="the tool's timeout")
    p.add_argument("--delay-s", type=float, default=1.5, help="how long the slow service holds each answer")
    p.add_argument("--healthy-delay-s", type=float, default=0.0, help="how long the healthy service holds each answer")
    p.add_argument("--concurrency", type=int, default=1, help=f"requests in flight at once (1 to {MAX_CONCURRENCY})")
    p.add_argument("--questions", type=int, default=47, help="tool questions per scenario (the set has 47)")
    p.add_argument("--breaker-failures", type=int, default=3, help="failures in a row that open the tool's breaker")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.timeout_s <= 0:
        raise InputError("must be > 0", field="--timeout-s")
    if args.delay_s <= args.timeout_s:
        raise InputError("must exceed --timeout-s (the slow scenario is a service slower than the timeout)", field="--delay-s")
    if not 0 <= args.healthy_delay_s < args.timeout_s:
        raise InputError("must be >= 0 and below --timeout-s (a healthy service answers within the timeout)",
                         field="--healthy-delay-s")
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        raise InputError(f"must be 1 to {MAX_CONCURRENCY} (serve's request threads)", field="--concurrency")
    if args.questions < 1:
        raise InputError("must be >= 1", field="--questions")
    if args.breaker_failures < 1:
        raise InputError("must be >= 1", field="--breaker-failures")
    return args


def ask_all(pipeline: Any, queries: list[Any], concurrency: int) -> list[tuple[float, Any]]:
    """(milliseconds, result) per query, `concurrency` requests in flight at once through the one pipeline."""
    from concurrent.futures import ThreadPoolExecutor

    def timed(q: Any) -> tuple[float, Any]:
        t0 = time.perf_counter()
        result = pipeline.run(q)
        return (time.perf_counter() - t0) * 1000, result

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench-request") as pool:
        return list(pool.map(timed, queries))


def scenario(name: str, url: str, args: argparse.Namespace, documents: list[Any], queries: list[Any], workspace: Path) -> dict[str, Any]:
    from ragopt.backends.collection_status import SCHEMA
    from ragopt.config import ChunkerConfig, RetrievalConfig
    from ragopt.plan import PlanConfig, open_plan
    from ragopt.resources import Resources

    plan = PlanConfig(chunker=ChunkerConfig(chunker="tokens", size=64, overlap=16), retrieval=RetrievalConfig(retriever="bm25", top_k=5),
                      stages={"generate": {"generator": "extractive"},
                              "tool": {"call": "always", "url": url, "result_schema": json.dumps(SCHEMA),
                                       "timeout_s": args.timeout_s, "breaker_failures": args.breaker_failures}})
    with Resources() as resources:
        pipeline, _ = open_plan(plan, documents, workspace, resources=resources, progress=False)
        pipeline.run(queries[0])  # loading the tokenizer and the first connection are not a request's time
        next(s.stage for s in pipeline.steps if s.stage.name == "tool").breaker.success()  # the warm-up's failure undone
        totals, tool_ms, causes, incomplete, answered = [], [], Counter(), 0, 0
        for ms, result in ask_all(pipeline, queries, args.concurrency):
            totals.append(ms)
            span = result.trace.span("tool")
            tool_ms.append(span.ms if span else 0.0)
            answered += result.answer is not None and bool(result.answer.text)
            incomplete += bool(result.answer and result.answer.incomplete)
            causes.update(d.split(":")[1].split("->")[0].strip() for d in result.trace.degraded if d.startswith("tool:"))
    lat, tl = percentiles(totals), percentiles(tool_ms)
    return {"scenario": name, "requests": len(queries), "answered": answered, "incomplete_share": incomplete / len(queries),
            "p50_ms": lat["p50"], "p95_ms": lat["p95"], "max_ms": max(totals), "tool_p50_ms": tl["p50"],
            "tool_p95_ms": tl["p95"], "causes": dict(causes),
            "bounded": max(totals) <= (args.timeout_s + 1.0) * 1000}


def main() -> None:
    args = parse_args()
    from ragopt.backends.collection_status import CollectionStatusService
    from ragopt.data import load_evalset
    from ragopt.shipped import shipped_collection_runs, shipped_dataset

    evalset = load_evalset(shipped_dataset() / "tool_questions.jsonl")
    queries = [q.query for q in evalset.queries][: args.questions]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-tool-") as tmp:
        workspace = Path(tmp)
        for name, delay in (("healthy", args.healthy_delay_s), ("slow", args.delay_s), ("down", None)):
            service = CollectionStatusService(shipped_collection_runs(), delay_s=delay or 0.0)
            url = service.status_url
            if delay is None:
                service.close()
            try:
                rows.append(scenario(name, url, args, evalset.documents, queries, workspace))
            finally:
                service.close()
    base = rows[0]
    for r in rows:
        r["p50_vs_healthy"] = r["p50_ms"] / base["p50_ms"]
        r["p95_vs_healthy"] = r["p95_ms"] / base["p95_ms"]
    out = {"timeout_s": args.timeout_s, "delay_s": args.delay_s, "healthy_delay_s": args.healthy_delay_s,
           "concurrency": args.concurrency, "breaker_failures": args.breaker_failures,
           "date": time.strftime("%Y-%m-%d"), "scenarios": rows}
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return
    print(f"tool timeout {args.timeout_s} s, slow service {args.delay_s} s, healthy service {args.healthy_delay_s} s, "
          f"breaker opens after {args.breaker_failures} failures; {len(queries)} tool questions per scenario, "
          f"{args.concurrency} at once")
    print(f"{'scenario':<9}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'x p50':>7}{'x p95':>7}{'tool p50/p95':>15}"
          f"{'incompl.':>9}{'answered':>9}  bounded  causes")
    for r in rows:
        print(f"{r['scenario']:<9}{r['p50_ms']:>9.1f}{r['p95_ms']:>9.1f}{r['max_ms']:>9.1f}{r['p50_vs_healthy']:>7.2f}"
              f"{r['p95_vs_healthy']:>7.2f}{r['tool_p50_ms']:>8.1f}/{r['tool_p95_ms']:<6.1f}{r['incomplete_share']:>9.2f}"
              f"{r['answered']:>5}/{r['requests']:<3}  {str(r['bounded']):<7}  {r['causes']}")


if __name__ == "__main__":
    try:
        main()
    except InputError as exc:
        print(f"bench_tool: error: {exc}", file=sys.stderr)
        sys.exit(2)
