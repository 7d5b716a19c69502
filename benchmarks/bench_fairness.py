"""Fair serving under a noisy neighbour: `ragopt serve` (the shipped hospital set, no cache) with the in-process
engine (one slot) and with llama-server (--parallel 4), loaded by `ragopt loadtest`'s tenants.

    python benchmarks/bench_fairness.py [--engines inprocess llama-server] [--duration 60] [--flood 6] [--json]

Scenarios, per engine (every one with the fair scheduler unless named fifo):
- solo:            the quiet tenant alone, 1 closed-loop client;
- flood_fifo:      quiet (1 client) beside a flooding tenant (--flood clients), arrival order = the old admission;
- flood_fair:      the same under the fair scheduler;
- backlogged:      two flooding tenants (--flood clients each): Jain's index over their weighted service;
- admin_idle:      a privileged key (priority 1; with slots > 1 also reserved_slots 1) alone, 1 client;
- admin_flood:     that key beside the flood.
The fair runs can also cap each tenant's slots (--tenant-cap; the admin key's reserved slot is held apart, so
with 4 slots a cap of 2 leaves one free for a second tenant) and evaluate prompts one at a time
(--serial-prefill); fifo, the old admission, runs without either.
Figures per scenario and tenant: answers, p95 TTFT, tokens/s; ratios measured in the same run: the quiet
tenant's p95 TTFT under the flood over its solo p95, the admin's over its idle p95, total tokens/s of the fair
scheduler over fifo's. With one slot and no preemption the quiet tenant cannot do better than waiting for the
request in service, so there the goal is a wait of at most one request's service time: the quiet tenant's p95
TTFT beside the flood minus its solo p95 (`quiet_extra_p95_ms`) against the p95 of one request's service time
(slot taken to last byte) in that scenario (`service_p95_ms`; p95 against p95: a quiet request arriving as a
long request takes the slot waits for all of it). Per request, every quiet request that waited (server-side
queue time) is set against the request that held the slot when it arrived, and one that waited past that
request's end is counted (`quiet_waits`). Every scenario gets a fresh serve, so no tenant carries service
counters from the one before. Only one llama.cpp engine runs at a time (ggml threads spin: two engines on 2
cores slow each other 10-50x); every scenario records the 1-minute load average, because on a shared machine
the figures move with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragopt.errors import InputError  # noqa: E402
from ragopt.serve.loadspec import LoadSpec, TenantLoad  # noqa: E402

KEYS = {"quiet-key": "quiet", "flood-key": "flood", "flood2-key": "flood2", "admin-key": "ops"}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engines", nargs="+", default=["inprocess", "llama-server"], choices=["inprocess", "llama-server"])
    p.add_argument("--duration", type=float, default=60.0, help="seconds of sending per scenario")
    p.add_argument("--flood", type=int, default=6, help="closed-loop clients of a flooding tenant")
    p.add_argument("--parallel", type=int, default=4, help="llama-server slots")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--deadline", type=float, default=60.0, help="serve --deadline (s)")
    p.add_argument("--dataset", default=str(ROOT / "evalsets" / "hospital"))
    p.add_argument("--serve-args", default="--retriever bm25 --chunk-size 128 --top-k 3",
                   help="retrieval flags for ragopt serve (default: small prompts, so a request takes seconds, not tens)")
    p.add_argument("--tenant-cap", type=int, default=None,
                   help="with llama-server: each tenant's max_concurrency under the fair scheduler (e.g. parallel - 1, so "
                        "no tenant holds every slot); fifo, the old admission, has no caps")
    p.add_argument("--serial-prefill", action="store_true", help="serve --serial-prefill under the fair scheduler")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.duration <= 0 or args.flood < 1 or args.parallel < 1 or args.max_tokens < 1 or args.deadline <= 0:
        raise InputError("--duration, --deadline, --flood, --parallel and --max-tokens must be positive", field="--duration")
    if args.tenant_cap is not None and not 1 <= args.tenant_cap <= args.parallel:
        raise InputError(f"must be between 1 and --parallel ({args.parallel})", field="--tenant-cap")
    if not Path(args.dataset).is_dir():
        raise InputError("not a folder", path=args.dataset, field="--dataset")
    return args


def write_keys(folder: Path, slots: int, tenant_cap: int | None) -> Path:
    admin = {"tenant": "ops", "priority": 1, **({"reserved_slots": 1} if slots > 1 else {})}
    keys = {k: {"tenant": t} for k, t in KEYS.items() if t != "ops"} | {"admin-key": admin}
    caps = {t: {"max_concurrency": tenant_cap} for t in KEYS.values() if t != "ops"} if tenant_cap else {}
    path = folder / f"keys-{slots}-{tenant_cap}.json"
    path.write_text(json.dumps({"keys": keys, "tenants": caps}), encoding="utf-8")
    return path


@contextmanager
def serve(args: argparse.Namespace, engine: str, schedule: str, keys: Path, workspace: Path) -> Iterator[str]:
    from ragopt.backends.child_server import free_port, served

    port = free_port()
    cmd = [sys.executable, "-m", "ragopt", "--workspace", str(workspace), "serve", "--dataset", args.dataset, "--no-cache",
           "--api-keys", str(keys), "--port", str(port), "--engine", engine, "--threads", "1", "--max-tokens", str(args.max_tokens),
           "--schedule", schedule, "--deadline", str(args.deadline), "--queue-timeout", str(args.deadline),
           *(["--serial-prefill"] if args.serial_prefill and schedule == "fair" else []),
           *(["--parallel", str(args.parallel)] if engine == "llama-server" else []), *args.serve_args.split()]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    url = f"http://127.0.0.1:{port}"
    with served(cmd, f"{url}/healthz", timeout_s=360, log=workspace / f"serve-{engine}-{schedule}.log", name="ragopt serve",
                env=env, interval_s=0.2, request_timeout_s=1, grace_s=30):
        yield url


def run_scenario(url: str, tenants: list[TenantLoad], args: argparse.Namespace, questions: tuple[str, ...]) -> dict[str, Any]:
    from ragopt.serve.loadtest import run_load
    from ragopt.trace import percentiles

    spec = LoadSpec(url=url, api_keys=(), duration_s=args.duration, tenants=tuple(tenants), questions=questions,
                    long_fraction=0.0, timeout_s=args.deadline + 30)
    load_before = os.getloadavg()[0]
    report = asyncio.run(run_load(spec))
    keep = ("sent", "ok", "rate_limited", "refused", "timed_out", "errors", "ttft_ms", "latency_ms", "tokens_per_s",
            "output_tokens_per_s", "tokens_in_total", "tokens_out_total")
    return {"tenants": {n: {k: t[k] for k in keep} for n, t in report["tenants"].items()}, "jain_index": report["jain_index"],
            "tokens_per_s": report["tokens_per_s"], "elapsed_s": report["elapsed_s"], "load_1min": [load_before, os.getloadavg()[0]],
            "service_s": percentiles(_slot_span(r)[1] - _slot_span(r)[0] for r in report["requests"] if r["status"] == "ok" and r["queue_ms"] is not None),
            "quiet_waits": waits_behind_holder(report["requests"], "quiet")}


def _slot_span(r: dict[str, Any]) -> tuple[float, float]:
    """When a request held the slot: from its arrival plus its server-side queue time to its last byte."""
    return r["start_s"] + r["queue_ms"] / 1000, r["end_s"]


def _tokens(r: dict[str, Any]) -> int:
    return r["tokens_in"] + r["tokens_out"]


def waits_behind_holder(requests: list[dict[str, Any]], tenant: str) -> dict[str, Any] | None:
    """One slot: each of `tenant`'s requests that waited, against the request holding the slot when it arrived.

    The holder is the other request whose slot span covers the arrival; of two, the one granted last (client-side
    ends trail the server's release by the last bytes, so spans overlap by milliseconds). `over_one_service`
    counts waits that outlasted the holder by more than 0.1 s (someone else went first); each such case keeps
    the tokens of the request, of the tenant's previous one and of the requests served next, to read why.
    """
    served = [r for r in requests if r["queue_ms"] is not None]
    mine = [r for r in served if r["tenant"] == tenant and r["queue_ms"] > 100]
    if not mine:
        return None
    ratios, after, cases = [], [], []
    for r in mine:
        holders = [h for h in served if h is not r and _slot_span(h)[0] <= r["start_s"] < _slot_span(h)[1]]
        if not holders:
            continue
        holder = max(holders, key=lambda h: _slot_span(h)[0])
        start, end = _slot_span(holder)
        ratios.append(r["queue_ms"] / 1000 / (end - start))
        after.append(r["start_s"] + r["queue_ms"] / 1000 - end)
        if after[-1] > 0.1:
            previous = max((h for h in served if h["tenant"] == tenant and h["end_s"] <= r["start_s"]), key=lambda h: h["end_s"],
                           default=None)
            cases.append({"arrived_s": r["start_s"], "waited_s": r["queue_ms"] / 1000, "holder": [holder["tenant"], start, end],
                          "tokens": _tokens(r), "previous_tokens": _tokens(previous) if previous else None,
                          "next": sorted((_slot_span(h)[0], h["tenant"], _tokens(h)) for h in served
                                         if end - 0.5 <= _slot_span(h)[0] < r["end_s"])[:3]})
    return {"waited": len(mine), "matched": len(ratios), "max_wait_over_holder_service": max(ratios, default=None),
            "max_after_holder_s": max(after, default=None), "over_one_service": sum(a > 0.1 for a in after), "cases": cases[:5]}


def measure_engine(args: argparse.Namespace, engine: str, folder: Path, questions: tuple[str, ...]) -> dict[str, Any]:
    slots = args.parallel if engine == "llama-server" else 1
    keys = {"fair": write_keys(folder, slots, args.tenant_cap if slots > 1 else None), "fifo": write_keys(folder, slots, None)}
    quiet, admin = TenantLoad("quiet", "quiet-key", concurrency=1), TenantLoad("admin", "admin-key", concurrency=1)
    flood, flood2 = TenantLoad("flood", "flood-key", concurrency=args.flood), TenantLoad("flood2", "flood2-key", concurrency=args.flood)
    plan = {"fair": {"solo": [quiet], "flood_fair": [quiet, flood], "backlogged": [flood, flood2], "admin_idle": [admin],
                     "admin_flood": [admin, flood]},
            "fifo": {"flood_fifo": [quiet, flood]}}
    out: dict[str, Any] = {}
    for schedule, scenarios in plan.items():
        for name, tenants in scenarios.items():
            with serve(args, engine, schedule, keys[schedule], folder) as url:
                print(f"[{engine}] {name} ({args.duration:g} s)...", file=sys.stderr, flush=True)
                out[name] = run_scenario(url, tenants, args, questions)
                print(f"[{engine}] {name}: " + ", ".join(f"{n} ok {t['ok']}/{t['sent']} p95 TTFT {t['ttft_ms'].get('p95', float('nan')):.0f} ms"
                                                        for n, t in out[name]["tenants"].items()), file=sys.stderr, flush=True)
    return {"slots": slots, "scenarios": out, "goals": goals(out, slots)}


def _p95(scenario: dict[str, Any], tenant: str) -> float | None:
    return scenario["tenants"][tenant]["ttft_ms"].get("p95")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def goals(s: dict[str, Any], slots: int) -> dict[str, Any]:
    quiet_ratio = _ratio(_p95(s["flood_fair"], "quiet"), _p95(s["solo"], "quiet"))
    admin_ratio = _ratio(_p95(s["admin_flood"], "admin"), _p95(s["admin_idle"], "admin"))
    throughput = _ratio(s["flood_fair"]["tokens_per_s"], s["flood_fifo"]["tokens_per_s"])
    out: dict[str, Any] = {
        "quiet_p95_ttft_ratio_fair": quiet_ratio,
        "quiet_p95_ttft_ratio_fifo": _ratio(_p95(s["flood_fifo"], "quiet"), _p95(s["solo"], "quiet")),
        "admin_p95_ttft_ratio": admin_ratio,
        "jain_backlogged": s["backlogged"]["jain_index"],
        "throughput_fair_over_fifo": throughput,
        "jain_ok": (s["backlogged"]["jain_index"] or 0) >= 0.9,
        "throughput_ok": throughput is not None and throughput >= 0.95,
    }
    if slots > 1:
        out["quiet_ok"] = quiet_ratio is not None and quiet_ratio <= 1.5
        out["admin_ok"] = admin_ratio is not None and admin_ratio <= 1.5
    else:  # one slot, no preemption: at most one request's service beyond solo
        extra = (_p95(s["flood_fair"], "quiet") or float("inf")) - (_p95(s["solo"], "quiet") or 0.0)
        service_p95_ms = 1000 * s["flood_fair"]["service_s"].get("p95", 0.0)
        out.update({"quiet_extra_p95_ms": extra, "service_p95_ms": service_p95_ms,
                    "solo_service_mean_ms": 1000 * s["solo"]["service_s"].get("mean", 0.0),
                    "quiet_waits": s["flood_fair"]["quiet_waits"] or {}, "quiet_ok": extra <= service_p95_ms})
    return out


def main() -> int:
    try:
        args = parse_args()
    except InputError as exc:
        print(f"bench_fairness: error: {exc}", file=sys.stderr)
        return 2
    from ragopt.data import load_evalset

    evalset = load_evalset(args.dataset)
    questions = tuple(q.query.text for q in sorted(evalset.queries, key=lambda q: q.query.id))
    result: dict[str, Any] = {"duration_s": args.duration, "flood_clients": args.flood, "max_tokens": args.max_tokens,
                              "serve_args": args.serve_args, "tenant_cap": args.tenant_cap, "serial_prefill": args.serial_prefill,
                              "engines": {}}
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as tmp:
        for engine in args.engines:
            result["engines"][engine] = measure_engine(args, engine, Path(tmp), questions)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for engine, r in result["engines"].items():
        print(f"== {engine} ({r['slots']} slot(s)) ==")
        for name, sc in r["scenarios"].items():
            row = "; ".join(f"{n}: {t['ok']}/{t['sent']} ok, p95 TTFT {t['ttft_ms'].get('p95', float('nan')):.0f} ms, "
                            f"{t['tokens_per_s']:.1f} tok/s" for n, t in sc["tenants"].items())
            print(f"{name:<12} {row}; total {sc['tokens_per_s']:.1f} tok/s; load {sc['load_1min'][0]:.1f}")
        print("goals: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in r["goals"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
