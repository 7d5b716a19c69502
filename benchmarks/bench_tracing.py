"""What exporting traces costs `ragopt serve`: request latency with OTLP export on, off, and with no OpenTelemetry
SDK importable at all, in one run.

    python benchmarks/bench_tracing.py [--requests 200] [--rounds 4] [--engine extractive] [--dataset DIR] [--json]

Three `ragopt serve` processes (same flags, same workspace, BM25 over the shipped hospital set by default, answers
cache off) answer the same questions one at a time:
- off: no OTEL_* variable set (the baseline);
- on: OTEL_EXPORTER_OTLP_ENDPOINT set to a receiver in this script (a loopback HTTP server that decodes each OTLP
  request and counts its spans), nothing else changed;
- no_sdk: like off, but the OpenTelemetry SDK and exporter and `mlflow` blocked from import (sys.modules) in the
  serve process (the OpenTelemetry API stays: FastAPI imports it itself).
Rounds interleave the arms (off, on, no_sdk, ...) so the noise of a shared machine falls on all three. Latency is the
client's wall-clock per request (HTTP round trip, JSON answer). Reported: p50/p95/mean per arm, on/off and
no_sdk/off ratios, the spans the receiver decoded (one root + one per stage per exported request), and the
1-minute load average before and after, and what building and queueing one trace costs (the same
`export_served` that serve's trace-builder thread calls, on a real response, timed call by call in this process: the median of 300). The default engine, extractive, makes requests short (a few ms), so the
export's share is as large as it gets; with an LLM it is a smaller share of seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.trace import percentiles  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("off", "on", "no_sdk")
# the SDK, the exporter and MLflow as if not installed (the OpenTelemetry API stays: FastAPI itself imports it)
BLOCK = ("import sys; sys.modules.update({'opentelemetry.sdk': None, 'opentelemetry.exporter': None, 'mlflow': None}); "
         "from ragopt.cli import main; sys.exit(main(sys.argv[1:]))")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=200, help="measured requests per arm (after --warmup)")
    p.add_argument("--warmup", type=int, default=10, help="requests per arm before measuring")
    p.add_argument("--rounds", type=int, default=4, help="interleaved rounds the requests are split into")
    p.add_argument("--engine", choices=["extractive", "inprocess"], default="extractive")
    p.add_argument("--dataset", default=str(ROOT / "ragopt" / "shipped" / "evalsets" / "hospital"))
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
    head = [sys.executable, "-c", BLOCK] if arm == "no_sdk" else [sys.executable, "-m", "ragopt"]
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


def export_cost_us(sink_url: str, answer: dict[str, Any], question: str, n: int = 300) -> float:
    """Median wall-clock microseconds one `Tracing.export_served` call takes on a real response (what serve's worker
    thread does after handing the answer over: build the spans, queue them), timed call by call in this process with
    5 ms between calls so the batch exporter's thread sends them meanwhile, as it does between requests."""
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


def measure(args: argparse.Namespace) -> dict[str, Any]:
    sink = Sink()
    pool = questions(args.dataset)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        keys = Path(tmp) / "keys.json"
        keys.write_text(json.dumps({"bench": {"tenant": "north-hospital", "scopes": ["clinical"]}}), encoding="utf-8")
        urls = {arm: stack.enter_context(served(arm, args, Path(tmp) / "ws", keys, sink.url)) for arm in ARMS}
        for arm in ARMS:
            timed_requests(urls[arm], pool[: args.warmup])
        latencies: dict[str, list[float]] = {arm: [] for arm in ARMS}
        last: list[Any] = []
        per_round = -(-args.requests // args.rounds)
        for r in range(args.rounds):
            asked = [pool[(r * per_round + i) % len(pool)] for i in range(min(per_round, args.requests - r * per_round))]
            for arm in ARMS:
                latencies[arm] += timed_requests(urls[arm], asked, last if arm == "on" else None)
            print(f"round {r + 1}/{args.rounds}: {', '.join(f'{a} {len(v)}' for a, v in latencies.items())}", file=sys.stderr)
    # the serve processes have stopped: the 'on' one sent what it still held on its way out
    stats = {arm: percentiles(v) for arm, v in latencies.items()}
    received = {"traces": len(sink.traces), "spans": sink.spans, "requests_sent_with_export_on": args.warmup + args.requests}
    cost = export_cost_us(sink.url, last[0], pool[0])  # after the count: these traces reach the same receiver
    return {
        "engine": args.engine, "dataset": Path(args.dataset).name, "requests_per_arm": args.requests, "rounds": args.rounds,
        "latency_ms": {arm: {k: s[k] for k in ("p50", "p95", "mean", "n")} for arm, s in stats.items()},
        "ratio_on_over_off": {k: stats["on"][k] / stats["off"][k] for k in ("p50", "p95")},
        "ratio_no_sdk_over_off": {k: stats["no_sdk"][k] / stats["off"][k] for k in ("p50", "p95")},
        "exported": received,
        "export_us_per_request": cost, "export_share_of_off_p50": cost / 1000 / stats["off"]["p50"],
        "load_1min": {"before": load_before, "after": os.getloadavg()[0]},
    }


def print_table(report: dict[str, Any]) -> None:
    print(f"serve latency per request ({report['engine']} answers, {report['dataset']}, {report['requests_per_arm']} "
          f"requests per arm in {report['rounds']} interleaved rounds)")
    print(f"  {'arm':<8}{'p50 ms':>10}{'p95 ms':>10}{'mean ms':>10}")
    for arm, s in report["latency_ms"].items():
        print(f"  {arm:<8}{s['p50']:>10.2f}{s['p95']:>10.2f}{s['mean']:>10.2f}")
    on, nosdk = report["ratio_on_over_off"], report["ratio_no_sdk_over_off"]
    print(f"  export on / off: p50 {on['p50']:.3f}x  p95 {on['p95']:.3f}x;  no SDK / off: p50 {nosdk['p50']:.3f}x  p95 {nosdk['p95']:.3f}x")
    e = report["exported"]
    print(f"  receiver decoded {e['traces']} traces, {e['spans']} spans for {e['requests_sent_with_export_on']} requests sent")
    print(f"  building and queueing one request's trace (median call): {report['export_us_per_request']:.0f} us "
          f"({report['export_share_of_off_p50']:.2%} of the off arm's p50); serve does it on its trace-builder thread, off the request's path")
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
