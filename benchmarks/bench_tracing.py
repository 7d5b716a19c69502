"""What exporting traces costs `ragopt serve`: request latency with OTLP export on, off, and with no OpenTelemetry
SDK importable at all, in one run.

    python benchmarks/bench_tracing.py [--requests 1200] [--rounds 12] [--engine extractive] [--dataset DIR] [--json]

Three `ragopt serve` processes (same flags, same workspace, BM25 over the shipped hospital set by default, answers
cache off) answer the same questions one at a time:
- off: no OTEL_* variable set (the baseline);
- on: OTEL_EXPORTER_OTLP_ENDPOINT set to a receiver in this script (a loopback HTTP server that decodes each OTLP
  request and counts its spans), nothing else changed;
- no_sdk: like off, but the OpenTelemetry SDK and exporter and `mlflow` blocked from import (sys.modules) in the
  serve process (the OpenTelemetry API stays: FastAPI imports it itself).
Each round starts a fresh serve process per arm, one arm at a time, in every order in turn (12 rounds: each of the six
twice), because two processes on the same flags differ by several percent (per-round p50 ratios spread 0.65-1.35) and
an arm's place matters: in rotated orders no_sdk always followed 'on' and came out 5-8% faster than off in every run,
while answering alternately, request by request, the two were equal (10.84 vs 10.83 ms).
Latency is the client's wall-clock per request
(HTTP round trip, JSON answer). Reported: p50/p95/mean per arm over all rounds, on/off and no_sdk/off ratios, the same
ratio per round (its spread is the process noise), the spans the receiver decoded (one root + one per stage per
exported request), the 1-minute load average before and after, and what one trace costs: building it (the same
`export_served` that serve's exporter process calls, on a real response, timed call by call in this process: the
median of 300) and handing it over (pickling it, as the queue to the exporter process does in the serving process).
The default engine, extractive, makes requests short (a few ms), so the export's share is as large as it gets; with
an LLM it is a smaller share of seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.trace import percentiles  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("off", "on", "no_sdk")
# Every arm's serve starts through the same `python -c` line, so the arms differ only in what is named; the no_sdk
# arm first marks the SDK, the exporter and MLflow as not installed (the OpenTelemetry API stays: FastAPI itself
# imports it).
LAUNCH = "import sys; {block}from ragopt.cli import main; sys.exit(main(sys.argv[1:]))"
BLOCK = "sys.modules.update({'opentelemetry.sdk': None, 'opentelemetry.exporter': None, 'mlflow': None}); "


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=1200, help="measured requests per arm (after --warmup)")
    p.add_argument("--warmup", type=int, default=10, help="requests each serve process answers before it is measured")
    p.add_argument("--rounds", type=int, default=12, help="rounds the requests are split into, each with fresh processes")
    p.add_argument("--engine", choices=["extractive", "inprocess"], default="extractive")
    p.add_argument("--dataset", default=str(ROOT / "evalsets" / "hospital"))
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    for flag, value in (("--requests", args.requests), ("--rounds", args.rounds)):
        if value < 1:
            p.error(f"{flag} must be at least 1, got {value}")
    if args.warmup < 0:
        p.error(f"--warmup must be at least 0, got {args.warmup}")
    if not Path(args.dataset).is_dir():
        p.error(f"--dataset: not a folder: {args.dataset}")
    return args


class Sink:
    """An OTLP/HTTP receiver on a loopback port: decodes each export request and counts its spans."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        sink = self
        self.spans = 0
        self.traces: set[bytes] = set()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                request = ExportTraceServiceRequest.FromString(body)
                for rs in request.resource_spans:
                    for ss in rs.scope_spans:
                        sink.spans += len(ss.spans)
                        sink.traces.update(s.trace_id for s in ss.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@contextmanager
def served(arm: str, args: argparse.Namespace, workspace: Path, keys: Path, sink_url: str) -> Iterator[str]:
    from ragopt.backends import child_server
    from ragopt.errors import ChildServerError

    port = child_server.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT)
    if arm == "on":
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink_url
    head = [sys.executable, "-c", LAUNCH.format(block=BLOCK if arm == "no_sdk" else "")]
    cmd = [*head, "--workspace", str(workspace), "serve", "--port", str(port), "--dataset", args.dataset, "--api-keys",
           str(keys), "--engine", args.engine, "--retriever", "bm25", "--no-cache", "--key-rate", "10000", "--tenant-rate", "10000"]
    url = f"http://127.0.0.1:{port}"
    try:
        with child_server.served(cmd, f"{url}/healthz", timeout_s=300, name=f"serve ({arm})", env=env, interval_s=0.25,
                                 request_timeout_s=1, grace_s=60):
            yield url
    except ChildServerError as exc:
        raise SystemExit(f"bench_tracing: {exc}") from None


def questions(dataset: str) -> list[str]:
    with open(Path(dataset) / "questions.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["question"] for line in f if line.strip()]


def timed_requests(url: str, asked: list[str], last: list[Any] | None = None) -> list[float]:
    """Wall-clock ms per request; `last` receives the final response body."""
    import httpx

    ms = []
    with httpx.Client(timeout=120, headers={"Authorization": "Bearer bench"}) as client:
        for q in asked:
            t0 = time.perf_counter()
            r = client.post(f"{url}/v1/ask", json={"question": q})
            ms.append((time.perf_counter() - t0) * 1000)
            if r.status_code != 200:
                raise SystemExit(f"bench_tracing: {r.status_code} {r.text[:200]}")
            if last is not None:
                last[:] = [r.json()]
    return ms


def build_cost_us(sink_url: str, answer: dict[str, Any], question: str, n: int = 300) -> float:
    """Median wall-clock microseconds one `Tracing.export_served` call takes on a real response (what serve's exporter
    process does per answer: build the spans, queue them), timed call by call in this process with 5 ms between
    calls so the batch exporter's thread sends them meanwhile, as it does between requests."""
    import statistics

    from ragopt.observe.otel import Tracing
    from ragopt.observe.settings import otlp_settings

    tracing = Tracing(otlp_settings(sink_url, False, "bench", {}))
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        tracing.export_served(answer, question, {})
        took.append((time.perf_counter() - t0) * 1e6)
        time.sleep(0.005)
    tracing.shutdown()
    return statistics.median(took)


def handoff_cost_us(answer: dict[str, Any], question: str, n: int = 300) -> float:
    """Median microseconds to pickle one answer as serve's multiprocessing queue does before the exporter process
    gets it: the serving process's own share of exporting a trace."""
    import pickle
    import statistics

    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        pickle.dumps((answer, question, {}, time.time_ns()), pickle.HIGHEST_PROTOCOL)
        took.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(took)


def round_order(r: int) -> tuple[str, ...]:
    """The arms in round r's order: every permutation in turn, so each arm comes in each position and after each
    other arm equally often (in rotated orders one arm always followed 'on')."""
    import itertools

    orders = list(itertools.permutations(ARMS))
    return orders[r % len(orders)]


def run_round(r: int, asked: list[str], args: argparse.Namespace, paths: tuple[Path, Path], sink_url: str,
              last: list[Any]) -> dict[str, list[float]]:
    """One fresh serve process per arm, one after the other: --warmup requests, then `asked`, timed."""
    workspace, keys = paths
    out = {}
    for arm in round_order(r):
        with served(arm, args, workspace, keys, sink_url) as url:
            timed_requests(url, asked[: args.warmup])
            out[arm] = timed_requests(url, asked, last if arm == "on" else None)
    return out


def ratio(a: list[float], b: list[float]) -> float:
    return percentiles(a)["p50"] / percentiles(b)["p50"]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sink = Sink()
    pool = questions(args.dataset)
    load_before = os.getloadavg()[0]
    latencies: dict[str, list[float]] = {arm: [] for arm in ARMS}
    per_round_ratio: dict[str, list[float]] = {"on_over_off": [], "no_sdk_over_off": []}
    last: list[Any] = []
    per_round = -(-args.requests // args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys.json"
        keys.write_text(json.dumps({"bench": {"tenant": "north-hospital", "scopes": ["clinical"]}}), encoding="utf-8")
        rounds_asked = [[pool[(r * per_round + i) % len(pool)] for i in range(min(per_round, args.requests - r * per_round))]
                        for r in range(args.rounds)]
        for r, asked in enumerate(rounds_asked):
            got = run_round(r, asked, args, (Path(tmp) / "ws", keys), sink.url, last)
            for arm in ARMS:
                latencies[arm] += got[arm]
            per_round_ratio["on_over_off"].append(ratio(got["on"], got["off"]))
            per_round_ratio["no_sdk_over_off"].append(ratio(got["no_sdk"], got["off"]))
            print(f"round {r + 1}/{args.rounds} ({', '.join(round_order(r))}): p50 on/off "
                  f"{per_round_ratio['on_over_off'][-1]:.3f}, no_sdk/off {per_round_ratio['no_sdk_over_off'][-1]:.3f}",
                  file=sys.stderr)
    # every 'on' process sent what it still held on its way out
    stats = {arm: percentiles(v) for arm, v in latencies.items()}
    sent_on = len(latencies["on"]) + sum(min(args.warmup, len(asked)) for asked in rounds_asked)
    received = {"traces": len(sink.traces), "spans": sink.spans, "requests_sent_with_export_on": sent_on}
    build = build_cost_us(sink.url, last[0], pool[0])  # after the count: these traces reach the same receiver
    handoff = handoff_cost_us(last[0], pool[0])
    return {
        "engine": args.engine, "dataset": Path(args.dataset).name, "requests_per_arm": args.requests, "rounds": args.rounds,
        "latency_ms": {arm: {k: s[k] for k in ("p50", "p95", "mean", "n")} for arm, s in stats.items()},
        "ratio_on_over_off": {k: stats["on"][k] / stats["off"][k] for k in ("p50", "p95")},
        "ratio_no_sdk_over_off": {k: stats["no_sdk"][k] / stats["off"][k] for k in ("p50", "p95")},
        "p50_ratio_per_round": per_round_ratio,
        "exported": received,
        "build_us_per_request": build, "handoff_us_per_request": handoff,
        "handoff_share_of_off_p50": handoff / 1000 / stats["off"]["p50"],
        "load_1min": {"before": load_before, "after": os.getloadavg()[0]},
    }


def print_table(report: dict[str, Any]) -> None:
    print(f"serve latency per request ({report['engine']} answers, {report['dataset']}, {report['requests_per_arm']} "
          f"requests per arm in {report['rounds']} rounds of fresh processes)")
    print(f"  {'arm':<8}{'p50 ms':>10}{'p95 ms':>10}{'mean ms':>10}")
    for arm, s in report["latency_ms"].items():
        print(f"  {arm:<8}{s['p50']:>10.2f}{s['p95']:>10.2f}{s['mean']:>10.2f}")
    on, nosdk = report["ratio_on_over_off"], report["ratio_no_sdk_over_off"]
    print(f"  export on / off: p50 {on['p50']:.3f}x  p95 {on['p95']:.3f}x;  no SDK / off: p50 {nosdk['p50']:.3f}x  p95 {nosdk['p95']:.3f}x")
    spread = {k: sorted(v) for k, v in report["p50_ratio_per_round"].items()}
    print("  p50 ratio per round (median, min-max): " + ";  ".join(
        f"{k.replace('_over_', '/')} {v[len(v) // 2]:.3f} ({v[0]:.3f}-{v[-1]:.3f})" for k, v in spread.items()))
    e = report["exported"]
    print(f"  receiver decoded {e['traces']} traces, {e['spans']} spans for {e['requests_sent_with_export_on']} requests sent")
    print(f"  one request's trace (median call): building it {report['build_us_per_request']:.0f} us, in serve's exporter "
          f"process; handing it over {report['handoff_us_per_request']:.0f} us in the serving process "
          f"({report['handoff_share_of_off_p50']:.2%} of the off arm's p50)")
    print(f"  load average (1 min): {report['load_1min']['before']:.2f} before, {report['load_1min']['after']:.2f} after")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = measure(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
