"""How well ragopt's judges agree with people: LFQA-Verification answer sentences (../shared/data/lfqa_verification).

    python benchmarks/bench_judge.py [--judges support,llama,http] [--model GGUF] [--limit N] [--threads 1]
                                     [--resume DIR [--port P]] [--json]

Each answer sentence there is labelled by three annotators as supported, partially supported or not
supported by its passages (the majority label is used; sentences without a majority are left out). Every
judge judges every sentence of the same answers (`--limit N`: the first N in a fixed order that takes the
four answer sets in turn, so a subset is balanced across them). Judges: `support` (word overlap, the
baseline), `llama` (a GGUF in process, SmolLM2-135M by default, grammar-constrained yes/no) and `http` (the
same GGUF through llama.cpp's llama-server, started here with the same thread count, JSON-schema output),
one after the other, never two at once.

Reported per judge: balanced accuracy (mean of the recall on supported and on unsupported sentences) with
partially supported sentences counted as unsupported, and with them left out; at answer level (an answer is
unfaithful when any sentence's majority label is not_supported; the judge says so when it finds any sentence
unsupported); the share of unreadable verdicts; seconds and tokens (prompt + output) per verdict; each LLM
judge's seconds per verdict as a ratio to the support baseline's, measured in this run. Beside them, the
published balanced accuracies from SOURCE.md (LLM-AggreFact's LFQA part, possibly a processed subset).
Verdicts are not cached unless `--resume DIR` is given: then every verdict is kept in DIR as it comes, and the
same command run again (after a kill, say) judges only what is missing; seconds and tokens per verdict are then
those of this run's new verdicts (`cached_verdicts` says how many came from DIR). The http judge's verdicts are
keyed by its server's URL, so with --resume its llama-server listens on the fixed `--port`. A progress bar per
judge goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ragopt.cache import Cache  # noqa: E402
from ragopt.judge.judges import JudgeConfig, make_judge  # noqa: E402
from ragopt.judge.judging import JudgeItem, judge_items  # noqa: E402
from ragopt.resources import Resources  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "lfqa_verification" / "items.jsonl"
PUBLISHED = {"MiniCheck-Flan-T5-L": 0.852, "AlignScore": 0.845, "GPT-4o": 0.836, "GPT-3.5-Turbo": 0.738, "SummaC-CV": 0.621}


def load(path: Path, limit: int | None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    seen: dict[str, int] = {}
    ranked = []
    for row in rows:  # round robin over the answer sets, in file order within each
        n = seen.get(row["answer_source"], 0)
        seen[row["answer_source"]] = n + 1
        ranked.append(((n, row["answer_source"], row["id"]), row))
    ranked.sort(key=lambda x: x[0])
    return [row for _, row in ranked][:limit]


def items_of(rows: list[dict[str, Any]]) -> list[JudgeItem]:
    """Each answer with its labelled sentences as the claims to judge (as the annotators saw them)."""
    return [JudgeItem(id=r["id"], question=r["question"],
                      passages=tuple(" ".join(x for x in (p.get("title"), p["text"]) if x) for p in r["passages"]),
                      answer=" ".join(s["text"].strip() for s in r["sentences"]),
                      sentences=tuple(s["text"].strip() for s in r["sentences"])) for r in rows]


def balanced_accuracy(pairs: list[tuple[bool, bool]]) -> float | None:
    """Mean recall of both classes over (gold supported, judged supported) pairs; None when a class is missing."""
    pos = [j for g, j in pairs if g]
    neg = [not j for g, j in pairs if not g]
    if not pos or not neg:
        return None
    return (sum(pos) / len(pos) + sum(neg) / len(neg)) / 2


def score(rows: list[dict[str, Any]], judged: list[Any]) -> dict[str, Any]:
    strict, lenient, answers = [], [], []
    unreadable = total = 0
    for row, j in zip(rows, judged):
        labels = [s["majority"] for s in row["sentences"]]
        verdicts = [s.supported for s in j.sentences]
        total += len(verdicts)
        unreadable += sum(v is None for v in verdicts)
        for label, v in zip(labels, verdicts):
            if v is None or label == "no_majority":
                continue
            strict.append((label == "supported", v))
            if label != "partially":
                lenient.append((label == "supported", v))
        if all(v is not None for v in verdicts):
            answers.append(("not_supported" not in labels, all(verdicts)))
    return {
        "sentence_balanced_accuracy": balanced_accuracy(strict),
        "sentence_balanced_accuracy_without_partially": balanced_accuracy(lenient),
        "answer_balanced_accuracy": balanced_accuracy(answers),
        "sentences_scored": len(strict), "answers_scored": len(answers),
        "unreadable_share": unreadable / total if total else None, "verdicts": total,
    }


def run_judge(kind: str, args: argparse.Namespace, rows: list[dict[str, Any]]) -> dict[str, Any]:
    items = items_of(rows)
    server = None
    with Resources() as resources:
        config = JudgeConfig(kind=kind, model=args.model, n_threads=args.threads)
        if kind == "http":
            from ragopt.gguf_meta import resolve_model
            from ragopt.backends.llama_server import LlamaServer

            port = args.port if args.resume else None
            server = LlamaServer(resolve_model(args.model), threads=args.threads, ctx_per_slot=2048, port=port).start()
            config = JudgeConfig(kind="http", url=server.base_url)
        try:
            judge = make_judge(config, resources)
            cache = Cache(Path(args.resume)) if args.resume else None
            judged, totals = judge_items(items, judge, cache, metrics=("faithfulness",), progress=True, desc=kind)
        finally:
            if server is not None:
                server.stop()
    out = score(rows, judged)
    per_call = (lambda total: total / totals.calls) if totals.calls else (lambda total: None)  # all cached: not measured
    out.update({"judge": judge.name, "seconds": totals.seconds, "seconds_per_verdict": per_call(totals.seconds),
                "cached_verdicts": totals.cached,
                "tokens_per_verdict": per_call(totals.tokens), "judge_failures": totals.failures,
                "structured_output": getattr(judge, "structured", None)})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--judges", default="support,llama,http")
    p.add_argument("--model", default=None, help="GGUF for the llama and http judges (default: SmolLM2-135M)")
    p.add_argument("--limit", type=int, default=None, help="judge only the first N answers (balanced over the answer sets)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--resume", default=None, metavar="DIR", help="keep verdicts in DIR; a re-run judges only what is missing")
    p.add_argument("--port", type=int, default=18187, help="with --resume: the http judge's llama-server port (its URL keys its verdicts)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if not 1 <= args.port <= 65535:
        p.error("--port must be 1..65535")
    rows = load(Path(args.data), args.limit)
    results = {kind: run_judge(kind, args, rows) for kind in args.judges.split(",")}
    base = results.get("support", {}).get("seconds_per_verdict")
    for r in results.values():
        r["seconds_ratio_to_support"] = r["seconds_per_verdict"] / base if base and r["seconds_per_verdict"] is not None else None
    report = {"data": args.data, "answers": len(rows), "sentences": sum(len(r["sentences"]) for r in rows),
              "answer_ids": [r["id"] for r in rows] if args.limit else "all", "judges": results,
              "published_balanced_accuracy": PUBLISHED}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{report['answers']} answers, {report['sentences']} sentences ({args.data})")
    fmt = lambda v, spec=".3f": "-" if v is None else format(v, spec)  # noqa: E731
    print(f"{'judge':<44}{'BA sent':>9}{'BA -part':>9}{'BA ans':>8}{'unread':>8}{'s/verdict':>11}{'tok/verdict':>12}{'x support':>10}")
    for r in results.values():
        print(f"{r['judge']:<44}{fmt(r['sentence_balanced_accuracy']):>9}{fmt(r['sentence_balanced_accuracy_without_partially']):>9}"
              f"{fmt(r['answer_balanced_accuracy']):>8}{fmt(r['unreadable_share']):>8}{fmt(r['seconds_per_verdict'], '.4f'):>11}"
              f"{fmt(r['tokens_per_verdict'], '.0f'):>12}{fmt(r['seconds_ratio_to_support'], '.0f'):>10}")
    print("published (LLM-AggreFact LFQA, balanced accuracy): " + ", ".join(f"{k} {v:.3f}" for k, v in PUBLISHED.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
