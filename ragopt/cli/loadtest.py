"""`ragopt loadtest`: Poisson or fixed-concurrency load against a `ragopt serve`, with P50/P95/P99 and Little's law."""

from __future__ import annotations

import argparse
import json
import sys

from ragopt.cli import _common


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "loadtest",
        help="load-test a ragopt serve: QPS, TTFT, TPOT, P50/P95/P99, 429s, timeouts, cost, Little's law",
        description="Sends /v1/ask requests (a mix of short and long questions) at a Poisson --rate or from "
                    "--concurrency clients for --duration seconds; every request is counted as ok, 429, timed out or error.",
    )
    p.add_argument("--url", required=True, help="the service's root, e.g. http://127.0.0.1:8000")
    p.add_argument("--api-key", action="append", required=True, help="API key (repeat to spread requests over keys/tenants)")
    p.add_argument("--duration", type=float, required=True, help="seconds of sending")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--rate", type=float, help="Poisson arrivals per second (open loop)")
    g.add_argument("--concurrency", type=int, help="clients each sending the next request when the last ends")
    p.add_argument("--max-requests", type=int, default=None, help="stop sending after this many")
    p.add_argument("--long-fraction", type=float, default=0.3, help="share of long questions (default 0.3)")
    p.add_argument("--questions", default=None, help="a text file of short questions, one per line")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request before it counts as timed out")
    p.add_argument("--no-stream", action="store_true", help="plain JSON answers instead of server-sent events")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--html", default=None, help="write the HTML report here")
    p.add_argument("--out", default=None, help="write the full JSON report (with every request) here")
    p.add_argument("--json", action="store_true", help="print one JSON object (without the per-request list)")
    p.add_argument("--no-progress", action="store_true")
    return p


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ragopt.errors import InputError
    from ragopt.serve.loadtest import SHORT_QUESTIONS, LoadSpec
    from ragopt.serve.loadtest import run as run_load

    questions = SHORT_QUESTIONS
    if args.questions:
        try:
            questions = tuple(q.strip() for q in Path(args.questions).read_text(encoding="utf-8").splitlines() if q.strip())
        except (FileNotFoundError, IsADirectoryError):
            raise InputError("file not found", path=args.questions, field="--questions") from None
        if not questions:
            raise InputError("no questions in the file", path=args.questions, field="--questions")
    spec = LoadSpec(url=args.url, api_keys=tuple(args.api_key), duration_s=args.duration, rate=args.rate,
                    concurrency=args.concurrency, max_requests=args.max_requests, long_fraction=args.long_fraction,
                    questions=questions, timeout_s=args.timeout, stream=not args.no_stream, seed=args.seed)
    spec.check()
    _common.output_file(args.html, "--html")
    _common.output_file(args.out, "--out")
    report = run_load(spec, progress_bar=not args.no_progress)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")
    if args.html:
        from ragopt.serve.loadtest_report import write_html

        write_html(report, args.html)
    summary = {k: v for k, v in report.items() if k != "requests"}
    if args.json:
        print(json.dumps(summary))
        return 0
    ll = summary["littles_law"]
    print(f"sent {summary['sent']}: ok {summary['ok']}, 429 {summary['rate_limited']}, timed out {summary['timed_out']}, "
          f"errors {summary['errors']}, lost {summary['lost']}   ({summary['elapsed_s']:.1f} s)")
    print(f"QPS offered {summary['offered_qps']:.2f}, achieved {summary['achieved_qps']:.2f}")
    for name, key in (("latency", "latency_ms"), ("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("queue", "queue_ms")):
        s = summary[key]
        if s.get("n"):
            print(f"{name:<8} p50 {s['p50']:9.1f} ms  p95 {s['p95']:9.1f} ms  p99 {s['p99']:9.1f} ms  (n {s['n']})")
    print(f"cache hit rate {summary['cache_hit_rate']:.1%}; tokens/request in {summary['tokens_per_request']['in']:.1f}, "
          f"out {summary['tokens_per_request']['out']:.1f}; cost/request {summary['cost_per_request']:.6f}")
    print(f"Little's law: {ll['arrival_rate']:.2f}/s x {ll['mean_latency_s']:.3f} s = {ll['predicted_in_flight']:.2f} "
          f"predicted in flight; measured {ll['measured_in_flight']:.2f}")
    for e in summary["error_examples"]:
        print(f"error: {e}", file=sys.stderr)
    return 0
