"""What the repetition stop saves through `ragopt serve`: the same shipped-set questions with it on and off.

    python benchmarks/bench_repetition_stop.py [--questions N] [--max-tokens 128] [--threads 1] [--json]

Starts two `ragopt serve` processes (in-process SmolLM2, one thread each, the main job's retrieval: 64/16 chunks,
hybrid RRF, K = 5, no answer cache), one with `--repeat-stop 3` (the default) and one with `--repeat-stop 0`, and
asks both the same questions over HTTP (/v1/ask, one request at a time, alternating which server goes first): N questions spread over questions.jsonl plus the follow-up
questions of followups.jsonl (all, or the first --followups) (asked on its own, as a client that sends only the last message would).

Reported per setting: answers that ran to max_tokens, answers stopped as a loop, tokens generated, the budget
left unspent by stopped loops (`repetition_tokens_saved`: an upper bound, a loop may end on its own), the tokens
really saved (generated with the stop off minus on), p50 / p95 request latency (wall-clock at the client), and
per question both finish reasons and token counts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragopt.shipped import shipped_dataset  # noqa: E402

SHIPPED = shipped_dataset()


def questions(n: int, n_followups: int | None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (SHIPPED / "questions.jsonl").read_text().splitlines() if line.strip()]
    step = max(1, len(rows) // n)
    picked = [r for r in rows[::step] if not r.get("history")][:n]
    follow = [json.loads(line) for line in (SHIPPED / "followups.jsonl").read_text().splitlines() if line.strip()]
    return picked + follow[:n_followups]


def key_of(q: dict[str, Any]) -> str:
    return f"{q.get('tenant')}|{','.join(sorted(q.get('scopes', [])))}"


def post(url: str, key: str, question: str) -> tuple[dict[str, Any], float]:
    body = json.dumps({"question": question, "stream": False}).encode()
    req = urllib.request.Request(url, data=body, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as resp:
        out = json.loads(resp.read())
    return out, (time.perf_counter() - t0) * 1000


@contextmanager
def serving(repeat_stop: int, args: argparse.Namespace, keys_file: Path) -> Iterator[str]:
    """`ragopt serve` with this --repeat-stop, until the block ends: its base URL."""
    from ragopt.backends.child_server import free_port, served

    port = free_port()
    cmd = [sys.executable, "-m", "ragopt", "serve", "--dataset", str(SHIPPED), "--chunk-size", "64", "--chunk-overlap", "16",
           "--retriever", "hybrid", "--top-k", "5", "--no-cache", "--threads", str(args.threads), "--port", str(port),
           "--api-keys", str(keys_file), "--max-tokens", str(args.max_tokens), "--repeat-stop", str(repeat_stop)]
    url = f"http://127.0.0.1:{port}"
    with served(cmd, f"{url}/healthz", timeout_s=900, name="serve", cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                interval_s=1, grace_s=30):
        yield url


def ask(url: str, q: dict[str, Any]) -> dict[str, Any]:
    out, ms = post(f"{url}/v1/ask", key_of(q), q["question"])
    trace = out["trace"]
    saved = next((s["usage"]["attrs"].get("repetition_tokens_saved") for s in trace.get("spans", [])
                  if s["usage"]["attrs"].get("repetition_tokens_saved") is not None), None)
    return {"id": q["id"], "ms": ms, "finish": trace.get("finish_reason"), "tokens": trace.get("tokens_out"),
            "saved": saved, "answer": out.get("answer")}


def run_both(qs: list[dict[str, Any]], args: argparse.Namespace, keys_file: Path) -> dict[int, list[dict[str, Any]]]:
    """Both servers up at once, each question asked of both, alternating which goes first (one request at a time)."""
    with ExitStack() as stack:
        urls = {stop: stack.enter_context(serving(stop, args, keys_file)) for stop in (3, 0)}
        rows: dict[int, list[dict[str, Any]]] = {3: [], 0: []}
        for i, q in enumerate(qs):
            print(f"{i + 1}/{len(qs)} {q['id']}", file=sys.stderr, flush=True)
            for stop in ((3, 0) if i % 2 == 0 else (0, 3)):
                rows[stop].append(ask(urls[stop], q))
        return rows


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=40, help="questions from questions.jsonl (the follow-ups come on top)")
    ap.add_argument("--followups", type=int, default=None, help="follow-up questions asked (default: all 30)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.questions < 1 or args.max_tokens < 2 or args.threads < 1:
        ap.error("--questions and --threads must be >= 1, --max-tokens >= 2")
    qs = questions(args.questions, args.followups)
    with tempfile.TemporaryDirectory() as tmp:
        keys_file = Path(tmp) / "keys.json"
        keys = {key_of(q): {"tenant": q.get("tenant"), "scopes": q.get("scopes", [])} for q in qs}
        keys_file.write_text(json.dumps(keys))
        results = run_both(qs, args, keys_file)

    report: dict[str, Any] = {"questions": len(qs), "max_tokens": args.max_tokens, "threads": args.threads, "settings": {}}
    for stop, rows in results.items():
        ms = [r["ms"] for r in rows]
        report["settings"][f"repeat_stop={stop}"] = {
            "answers_at_max_tokens": sum(r["finish"] == "length" for r in rows),
            "answers_stopped_as_loop": sum(r["finish"] == "repetition" for r in rows),
            "tokens_generated": sum(r["tokens"] or 0 for r in rows),
            "budget_left_by_stops": sum(r["saved"] or 0 for r in rows),  # an upper bound: a loop may end on its own
            "latency_ms_p50": pct(ms, 0.5), "latency_ms_p95": pct(ms, 0.95),
            "looped_examples": [r["answer"] for r in rows if r["finish"] in ("repetition",)][:2],
        }
    report["answers"] = [{"id": a["id"], "on": [a["finish"], a["tokens"]], "off": [b["finish"], b["tokens"]],
                          "same_text": a["answer"] == b["answer"], "on_text": a["answer"][:300], "off_text": b["answer"][:300]}
                         for a, b in zip(results[3], results[0])]
    on, off = report["settings"]["repeat_stop=3"], report["settings"]["repeat_stop=0"]
    on["tokens_saved_vs_off"] = off["tokens_generated"] - on["tokens_generated"]  # what the stop really saved here
    report["p95_ratio_on_over_off"] = on["latency_ms_p95"] / off["latency_ms_p95"]
    report["tokens_ratio_on_over_off"] = on["tokens_generated"] / max(off["tokens_generated"], 1)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{len(qs)} questions through ragopt serve (SmolLM2, {args.threads} thread, max_tokens {args.max_tokens})")
    for name, m in report["settings"].items():
        print(f"  {name}: at max_tokens {m['answers_at_max_tokens']}, stopped as loop {m['answers_stopped_as_loop']}, "
              f"tokens {m['tokens_generated']} (budget left by stops {m['budget_left_by_stops']}), p50 {m['latency_ms_p50']:.0f} ms, p95 {m['latency_ms_p95']:.0f} ms")
    print(f"p95 on/off {report['p95_ratio_on_over_off']:.2f}x, tokens on/off {report['tokens_ratio_on_over_off']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
