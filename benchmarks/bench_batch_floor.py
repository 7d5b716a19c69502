"""What a free slot can promise on this machine: llama-server's time to first token for one request alone, and beside
other slots that are busy, with no ragopt in between.

    python benchmarks/bench_batch_floor.py [--parallel 4] [--threads 1] [--busy 3] [--probes 12] [--prompt-chars 1200] [--json]

A privileged key with a reserved slot never waits for a slot, so its TTFT under a flood over its TTFT when idle
is bounded below by what llama.cpp's continuous batching does when the other slots are busy: every decode step
and every prompt batch is computed for all active slots together, on the same cores. Scenarios (each probe is
a prompt of --prompt-chars characters of the shipped hospital documents, different every time and never cached,
generating --probe-tokens tokens; probes are sent one after another; the prompts' token counts are reported):
- idle:           the probe alone;
- beside_decode:  --busy slots decoding long answers (their prompts done before the first probe);
- beside_flood:   --busy closed-loop clients, each sending a prompt as long as the probe's and --flood-tokens
                  tokens of answer, again and again (what bench_fairness's flooding tenant makes the engine do).
Figures: p50 / p95 TTFT per scenario and their ratio to idle (measured in the same run).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.errors import InputError  # noqa: E402
from ragopt.trace import percentiles  # noqa: E402

HOSPITAL = Path(__file__).resolve().parents[1] / "evalsets" / "hospital"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parallel", type=int, default=4, help="llama-server slots")
    p.add_argument("--threads", type=int, default=1, help="llama-server threads (bench_fairness uses 1)")
    p.add_argument("--busy", type=int, default=3, help="slots kept busy beside the probe")
    p.add_argument("--probes", type=int, default=12, help="probes per scenario")
    p.add_argument("--prompt-chars", type=int, default=1200)
    p.add_argument("--probe-tokens", type=int, default=8)
    p.add_argument("--flood-tokens", type=int, default=48)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if min(args.parallel, args.threads, args.probes, args.prompt_chars, args.probe_tokens, args.flood_tokens) < 1:
        raise InputError("every count must be >= 1", field="--probes")
    if not 0 <= args.busy < args.parallel:
        raise InputError(f"must be between 0 and --parallel - 1 ({args.parallel - 1})", field="--busy")
    return args


def prompts(width: int) -> Iterator[str]:
    """Endless distinct prompts with `width` characters cut from the shipped documents."""
    from ragopt.data import load_evalset

    texts = [d.text for d in sorted(load_evalset(HOSPITAL).documents, key=lambda d: d.id)]
    corpus = " ".join(texts)
    for n in itertools.count():
        start = (n * 997) % max(len(corpus) - width, 1)
        yield f"Request {n}. Answer from the passage.\n\n{corpus[start:start + width]}\n\nQuestion: what does it say?\nAnswer:"


def stream_completion(client: Any, prompt: str, n_predict: int,
                      stop: threading.Event | None = None) -> tuple[float | None, int | None]:
    """Stream one completion: the milliseconds to its first token (None when stopped first), its prompt's tokens."""
    t0 = time.perf_counter()
    first, prompt_n = None, None
    body = {"prompt": prompt, "n_predict": n_predict, "stream": True, "cache_prompt": False, "ignore_eos": True,
            "temperature": 0.0}
    # a connection per request: llama-server closes kept-alive connections on its own schedule
    with client.stream("POST", "/completion", json=body, headers={"Connection": "close"}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if first is None and line.startswith("data:"):
                first = (time.perf_counter() - t0) * 1000
            if '"timings"' in line:  # the last event
                prompt_n = json.loads(line[len("data:"):]).get("timings", {}).get("prompt_n")
            if stop is not None and stop.is_set():
                break
    return first, prompt_n


def busy_clients(url: str, count: int, make_prompt: Iterator[str], n_predict: int, stop: threading.Event) -> list[threading.Thread]:
    """`count` closed-loop clients sending completions until `stop` is set."""
    import httpx

    lock = threading.Lock()

    def loop() -> None:
        with httpx.Client(base_url=url, timeout=600) as client:
            while not stop.is_set():
                with lock:
                    prompt = next(make_prompt)
                stream_completion(client, prompt, n_predict, stop)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    return threads


def scenario(url: str, args: argparse.Namespace, name: str, make_prompt: Iterator[str]) -> dict[str, Any]:
    import httpx

    stop = threading.Event()
    busy: list[threading.Thread] = []
    if name == "beside_decode":
        busy = busy_clients(url, args.busy, itertools.repeat("Count from one to ten thousand:"), 1500, stop)
    elif name == "beside_flood":
        busy = busy_clients(url, args.busy, make_prompt, args.flood_tokens, stop)
    time.sleep(8.0 if busy else 0.0)  # the busy slots are past their prompts (decode) or cycling (flood)
    load = os.getloadavg()[0]
    with httpx.Client(base_url=url, timeout=600) as client:
        probes = [stream_completion(client, next(make_prompt), args.probe_tokens) for _ in range(args.probes)]
    stop.set()
    for t in busy:
        t.join(timeout=120)
    return {"ttft_ms": percentiles(t for t, _ in probes if t is not None),
            "prompt_tokens": percentiles(n for _, n in probes if n is not None), "load_1min": load}


def main() -> int:
    try:
        args = parse_args()
    except InputError as exc:
        print(f"bench_batch_floor: error: {exc}", file=sys.stderr)
        return 2
    from ragopt.backends.llama_server import LlamaServer
    from ragopt.gguf_meta import resolve_model

    make_prompt = prompts(args.prompt_chars)
    result: dict[str, Any] = {"parallel": args.parallel, "threads": args.threads, "busy": args.busy,
                              "prompt_chars": args.prompt_chars, "probes": args.probes, "scenarios": {}}
    with LlamaServer(resolve_model(None), parallel=args.parallel, threads=args.threads) as server:
        for name in ("idle", "beside_decode", "beside_flood"):
            print(f"{name}...", file=sys.stderr, flush=True)
            result["scenarios"][name] = scenario(server.base_url, args, name, make_prompt)
    idle = result["scenarios"]["idle"]["ttft_ms"]
    for sc in result["scenarios"].values():
        sc["ratio_p50"] = sc["ttft_ms"]["p50"] / idle["p50"]
        sc["ratio_p95"] = sc["ttft_ms"]["p95"] / idle["p95"]
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    tokens = result["scenarios"]["idle"]["prompt_tokens"].get("mean", float("nan"))
    print(f"llama-server --parallel {args.parallel} -t {args.threads}, {args.busy} busy slot(s), {args.probes} probes of "
          f"{args.prompt_chars} characters ({tokens:.0f} prompt tokens on average)")
    for name, sc in result["scenarios"].items():
        t = sc["ttft_ms"]
        print(f"{name:<14} TTFT p50 {t['p50']:7.0f} ms  p95 {t['p95']:7.0f} ms  x idle {sc['ratio_p50']:.2f} / "
              f"{sc['ratio_p95']:.2f}  load {sc['load_1min']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
