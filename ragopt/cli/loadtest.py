"""`ragopt loadtest`: Poisson or fixed-concurrency load against a `ragopt serve`, with P50/P95/P99 and Little's law."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ragopt.cli import _common
from ragopt.errors import InputError


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "loadtest",
        help="load-test a ragopt serve: QPS, TTFT, TPOT, P50/P95/P99, 429s, timeouts, cost, Little's law",
        description="Sends /v1/ask requests (a mix of short and long questions) at a Poisson --rate or from "
                    "--concurrency clients for --duration seconds; every request is counted as ok, 429, timed out or error.",
    )
    p.add_argument("--url", required=True, help="the service's root, e.g. http://127.0.0.1:8000")
    p.add_argument("--api-key", action="append", default=None, help="API key (repeat to spread requests over keys/tenants)")
    p.add_argument("--duration", type=float, required=True, help="seconds of sending")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--rate", type=float, help="Poisson arrivals per second (open loop)")
    g.add_argument("--concurrency", type=int, help="clients each sending the next request when the last ends")
    p.add_argument("--max-requests", type=int, default=None, help="stop sending after this many")
    p.add_argument("--tenant", action="append", default=[], metavar="KEY:RATE",
                   help="one tenant's load, repeatable: KEY:RATE (Poisson per second) or KEY:cN (N closed-loop clients); "
                        "every figure is then reported per tenant, with Jain's index over their service")
    p.add_argument("--tenants", default=None, metavar="TOML",
                   help="tenants' loads: [[tenant]] name, api_key, rate or concurrency, questions (a file), weight")
    p.add_argument("--slo", action="append", default=[], metavar="EXPR",
                   help="find the capacity: the highest Poisson rate where every EXPR holds, e.g. p95_ttft_ms<=2000, "
                        "error_rate<=0.01 (each step lasts --duration seconds)")
    p.add_argument("--slo-start", type=float, default=0.1, help="first rate of the search (req/s); it doubles from there")
    p.add_argument("--slo-max", type=float, default=64.0, help="highest rate the search tries (req/s)")
    p.add_argument("--repeats", type=int, default=2, help="runs per rate in the search (the SLO is judged over their requests together)")
    p.add_argument("--refine", type=int, default=3, help="bisection steps between the last passing and first failing rate")
    p.add_argument("--long-fraction", type=float, default=None, help="share of long questions (default 0.3; 0 with --dataset)")
    p.add_argument("--questions", default=None, help="a text file of short questions, one per line")
    p.add_argument("--dataset", default=None, help="ask an evaluation set's questions (a ragopt or BEIR folder)")
    p.add_argument("--split", default="test", help="the --dataset split (BEIR)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request before it counts as timed out")
    p.add_argument("--no-stream", action="store_true", help="plain JSON answers instead of server-sent events")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--html", default=None, help="write the HTML report here")
    p.add_argument("--out", default=None, help="write the full JSON report (with every request) here")
    p.add_argument("--json", action="store_true", help="print one JSON object (without the per-request list)")
    p.add_argument("--no-progress", action="store_true")
    return p


def _questions(args: argparse.Namespace) -> tuple[str, ...]:
    from ragopt.serve.loadspec import SHORT_QUESTIONS, read_questions

    if args.questions and args.dataset:
        raise InputError("give --questions or --dataset, not both", field="--dataset")
    if args.questions:
        return read_questions(args.questions, "--questions")
    if args.dataset:
        from ragopt.data import load_evalset

        if not Path(args.dataset).exists():
            raise InputError("not found", path=args.dataset, field="--dataset")
        evalset = load_evalset(args.dataset, split=args.split)
        questions = tuple(q.query.text for q in sorted(evalset.queries, key=lambda q: q.query.id))
        if not questions:
            raise InputError("no questions in the set", path=args.dataset, field="--dataset")
        return questions
    return SHORT_QUESTIONS


def spec_from_args(args: argparse.Namespace) -> Any:
    from ragopt.serve.loadspec import LoadSpec, read_tenants, tenant_flag

    tenants = tuple(tenant_flag(text, i) for i, text in enumerate(args.tenant))
    if args.tenants:
        tenants += read_tenants(args.tenants)
    long_fraction = args.long_fraction if args.long_fraction is not None else (0.0 if args.dataset else 0.3)
    spec = LoadSpec(url=args.url, api_keys=tuple(args.api_key or ()), duration_s=args.duration, rate=args.rate,
                    concurrency=args.concurrency, max_requests=args.max_requests, long_fraction=long_fraction,
                    questions=_questions(args), timeout_s=args.timeout, stream=not args.no_stream, seed=args.seed, tenants=tenants)
    if args.slo:
        if tenants or args.concurrency is not None or args.rate is not None:
            raise InputError("the capacity search sets the rate itself: no --rate, --concurrency or --tenant", field="--slo")
        spec.check_common()
    else:
        spec.check()
    return spec


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    _common.output_file(args.html, "--html")
    _common.output_file(args.out, "--out")
    if args.slo:
        return _run_search(args, spec)
    from ragopt.serve.loadtest import run as run_load

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
    _print_summary(summary)
    for name, part in summary.get("tenants", {}).items():
        print(f"tenant {name}: ok {part['ok']} of {part['sent']}, TTFT p95 {part['ttft_ms'].get('p95', float('nan')):.0f} ms, "
              f"{part['tokens_per_s']:.1f} tokens/s")
    if "jain_index" in summary:
        print(f"Jain's index over weighted service: {summary['jain_index']}")
    return 0


def _run_search(args: argparse.Namespace, spec: Any) -> int:
    from ragopt.serve.loadtest import run as run_load
    from ragopt.serve.slo import SearchPlan, parse_slo, search_capacity

    slos = [parse_slo(text) for text in args.slo]
    plan = SearchPlan(start_rps=args.slo_start, max_rps=args.slo_max, repeats=args.repeats, refine=args.refine)
    plan.check()
    report = search_capacity(spec, slos, plan, lambda s: run_load(s, progress_bar=False),
                             progress=lambda line: print(line, file=sys.stderr, flush=True) if not args.no_progress else None)
    report["url"], report["duration_s"] = spec.url, spec.duration_s
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")
    if args.html:
        from ragopt.serve.loadtest_report import write_search_html

        write_search_html(report, args.html)
    if args.json:
        print(json.dumps(report))
        return 0
    low, high = report["interval_rps"]
    print(f"capacity {report['capacity_rps']:.3g} req/s under {', '.join(report['slo'])} (interval {low:.3g} .. "
          f"{'above ' + str(args.slo_max) if high is None else format(high, '.3g')} req/s); "
          f"{'SATURATED at that rate' if report['saturated_at_capacity'] else 'not saturated at that rate'}")
    return 0


def _print_summary(summary: dict[str, Any]) -> None:
    ll = summary["littles_law"]
    print(f"sent {summary['sent']}: ok {summary['ok']}, 429 {summary['rate_limited']}, 503 {summary['refused']}, timed out {summary['timed_out']}, "
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
