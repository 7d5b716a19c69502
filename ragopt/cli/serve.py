"""`ragopt serve`: the RAG pipeline as an HTTP service (FastAPI + uvicorn) with caches, limits and metrics."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ragopt.cli import _answer_plan, _common, _observe

DEFAULT_SMALL_MAX_WORDS = 8  # --small-max-words when --small-model is given without it


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve",
        help="serve the pipeline over HTTP: /v1/ask (SSE), /v1/chat/completions, /healthz, /metrics",
        description=(
            "Answers POST /v1/ask ({\"question\": ..., \"stream\": true|false}) and OpenAI-compatible "
            "/v1/chat/completions over retrieval + generation: a sweep's selected trial (--from results.json) or "
            "a plan (--plan plan.toml), rebuilt as it was measured, or the retrieval flags. Tenant and scopes come from the API key "
            "(--api-keys: a JSON object mapping each key to {\"tenant\": ..., \"scopes\": [...]})."
        ),
    )
    _common.add_answer_args(p)
    p.add_argument("--api-keys", required=True, help="JSON file: key -> {\"tenant\", \"scopes\", \"weight\", \"max_concurrency\", \"priority\", "
                                                        "\"reserved_slots\"} (or {\"keys\": that, \"tenants\": {name: {\"weight\", \"max_concurrency\"}}})")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--engine", choices=["inprocess", "llama-server", "http", "extractive"], default=None,
                   help="inprocess: llama.cpp in this process (one request at a time); llama-server: a child "
                        "llama-server with --parallel slots; http: any OpenAI-compatible --backend-url; extractive: no LLM (default: inprocess)")
    p.add_argument("--small-model", default=None, help="GGUF for short, simple questions and as the first fallback")
    p.add_argument("--small-max-words", type=int, default=None,
                   help=f"with --small-model: questions up to this many words go to it (default {DEFAULT_SMALL_MAX_WORDS})")
    p.add_argument("--backend-url", default=None, help="with --engine http: the server's root URL")
    p.add_argument("--parallel", type=int, default=None, help="llama-server slots (concurrent sequences; default 4)")
    p.add_argument("--redis", default=None, metavar="URL", help="caches, rate limits and quotas in Redis (shared by several serve processes)")
    p.add_argument("--no-cache", action="store_true", help="no answer or retrieval cache")
    p.add_argument("--cache-ttl", type=float, default=3600.0, help="seconds an answer or retrieval stays cached")
    p.add_argument("--deadline", type=float, default=60.0, help="seconds per request")
    p.add_argument("--generate-deadline", type=float, default=None, help="seconds for the generation stage")
    p.add_argument("--max-question-chars", type=int, default=4000, help="longer questions get 413")
    p.add_argument("--key-rate", type=float, default=50.0, help="requests/s per API key (token bucket)")
    p.add_argument("--key-burst", type=float, default=100.0)
    p.add_argument("--tenant-rate", type=float, default=100.0, help="requests/s per tenant (token bucket)")
    p.add_argument("--tenant-burst", type=float, default=200.0)
    p.add_argument("--daily-tokens", type=int, default=None, help="model tokens per tenant per UTC day")
    p.add_argument("--slots", type=int, default=None, help="requests generating at once (default: --parallel for llama-server, else 1)")
    p.add_argument("--queue-timeout", type=float, default=30.0, help="seconds a request may wait for a slot before 429")
    p.add_argument("--max-queue", type=int, default=64, help="requests that may wait for a slot before 429")
    p.add_argument("--schedule", choices=["fair", "fifo"], default="fair",
                   help="fair: the free slot goes to the tenant with the least weighted service (key weights, caps, "
                        "priorities and reserved slots from --api-keys); fifo: arrival order (the old admission)")
    p.add_argument("--aging", type=float, default=10.0, help="seconds of waiting that lift a request one priority class")
    p.add_argument("--serial-prefill", action="store_true",
                   help="grant a slot only once every granted request has its first token, so prompts are evaluated one "
                        "at a time beside the others' decoding (for CPU llama-server slots: docs/serving.md)")
    p.add_argument("--breaker-failures", type=int, default=3)
    p.add_argument("--breaker-reset", type=float, default=5.0, help="seconds before an open breaker lets a trial through")
    p.add_argument("--price-in", type=float, default=0.0, help="price per 1k input tokens")
    p.add_argument("--price-out", type=float, default=0.0, help="price per 1k output tokens")
    p.add_argument("--price-hourly", type=float, default=0.0, help="price of the machine per hour (local models)")
    _observe.add_trace_args(p)
    return p


SETTING_FLAGS = {
    "deadline_s": "--deadline", "generate_deadline_s": "--generate-deadline", "max_question_chars": "--max-question-chars",
    "key_rate_per_s": "--key-rate", "key_burst": "--key-burst", "tenant_rate_per_s": "--tenant-rate",
    "tenant_burst": "--tenant-burst", "daily_tokens_per_tenant": "--daily-tokens", "answer_ttl_s": "--cache-ttl",
    "retrieval_ttl_s": "--cache-ttl", "slots": "--slots", "kv_budget_bytes": "--kv-budget", "queue_timeout_s": "--queue-timeout",
    "max_queue": "--max-queue", "aging_s": "--aging", "schedule": "--schedule", "breaker_failures": "--breaker-failures", "breaker_reset_s": "--breaker-reset",
    "small_max_words": "--small-max-words", "price": "--price-in",
}


ENGINES = {"inprocess": "llama", "llama-server": "llama-server", "http": "http", "extractive": "extractive"}


def options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """Every flag validated into ServeOptions before anything is loaded; the first error names its flag. The
    flags become a plan (or --from/--plan names one), served as a sweep trial is built."""
    from ragopt.errors import InputError
    from ragopt.serve.build import ServeOptions
    from ragopt.serve.service import PriceTable, ServeSettings

    if not 1 <= args.port <= 65535:
        raise InputError(f"out of range, got {args.port}", field="--port")
    for flag, path in (("--model", args.model), ("--small-model", args.small_model)):
        if path is not None and not Path(path).is_file():
            raise InputError("model file not found", path=path, field=flag)
    if bool(args.backend_url) != (args.engine == "http"):
        raise InputError("--engine http and --backend-url (an OpenAI-compatible server's root) go together", field="--backend-url")
    saved = _common.saved_plan(args)
    given = _common.generator_flags(args, base_url=("--backend-url", args.backend_url), server_slots=("--parallel", args.parallel))
    plan, saved = _answer_plan.answer_plan(args, saved, ("--engine", ENGINES.get(args.engine), "llama"), given)
    budget = _common.kv_budget(args)
    price = _common.from_flags(PriceTable, {"input_per_1k": "--price-in", "output_per_1k": "--price-out", "hourly": "--price-hourly"},
                               input_per_1k=args.price_in, output_per_1k=args.price_out, hourly=args.price_hourly)
    settings = _common.from_flags(
        ServeSettings, SETTING_FLAGS, deadline_s=args.deadline, generate_deadline_s=args.generate_deadline,
        max_question_chars=args.max_question_chars, key_rate_per_s=args.key_rate, key_burst=args.key_burst,
        tenant_rate_per_s=args.tenant_rate, tenant_burst=args.tenant_burst, daily_tokens_per_tenant=args.daily_tokens,
        answer_ttl_s=args.cache_ttl, retrieval_ttl_s=args.cache_ttl, slots=args.slots if args.slots is not None else _slots(plan),
        kv_budget_bytes=budget, queue_timeout_s=args.queue_timeout, max_queue=args.max_queue, aging_s=args.aging,
        schedule=args.schedule, serial_prefill=args.serial_prefill, breaker_failures=args.breaker_failures,
        breaker_reset_s=args.breaker_reset, small_max_words=_small_max_words(args), price=price,
    )
    opts = ServeOptions(
        settings=settings, plan=plan, saved=saved, small_model=args.small_model, dataset=args.dataset,
        docs=_common.docs_options(args), split=args.split, auto_retriever=saved is None and args.retriever == "auto",
        embedder_given=bool(args.embedder),
        store=_common.store_config(args), redis_url=args.redis, cache=not args.no_cache,
    )
    _speculation_note(plan)
    return opts


def _small_max_words(args: argparse.Namespace) -> int:
    """The word limit of routing to --small-model (0: no small model); the flag alone would be ignored, so refused."""
    from ragopt.errors import InputError

    if args.small_model is None:
        if args.small_max_words is not None:
            raise InputError("routes questions to --small-model: give one (a plan that routes by itself, a sweep's trial "
                             "with stages.generate.route_small_max_words, carries its own limit)", field="--small-max-words")
        return 0
    return DEFAULT_SMALL_MAX_WORDS if args.small_max_words is None else args.small_max_words


def _slots(plan) -> int:  # type: ignore[no-untyped-def]
    """Requests generating at once by default: a llama-server's slots, else one."""
    from ragopt.plan import kind_in_slot
    from ragopt.stages.spec import GENERATE_SLOT

    config = plan.stage_config(kind_in_slot(GENERATE_SLOT))
    return config.server_slots if config.generator == "llama-server" else 1


def _speculation_note(plan) -> None:  # type: ignore[no-untyped-def]
    from ragopt.plan import kind_in_slot
    from ragopt.stages.spec import GENERATE_SLOT

    config = plan.stage_config(kind_in_slot(GENERATE_SLOT))
    if config.generator == "llama":
        _common.speculation_note(config.speculative, config.n_threads)


def run(args: argparse.Namespace) -> int:
    from contextlib import ExitStack

    from ragopt.serve.app import check_reservations, load_api_keys

    opts = options(args)
    keys = load_api_keys(args.api_keys)
    tracing = _observe.tracing(args, "serve")
    check_reservations(keys, opts.settings.slots, args.api_keys)
    _answer_plan.say_plan_notes(args)
    import uvicorn

    from ragopt.serve.app import create_app
    from ragopt.serve.build import build_service

    with ExitStack() as stack:
        if tracing is not None:
            stack.callback(tracing.shutdown)  # sends what is still queued
            _observe.exit_cleanly_on_sigterm()
        service = build_service(opts, _common.workspace(args), stack)
        app = create_app(service, keys, tracing=tracing)
        source = f"trial {opts.saved.provenance.trial}" if opts.saved and opts.saved.provenance else "the flags' plan"
        generator = service.backends["default"].model_id.split(":")[0]
        print(f"ragopt serve: {source}, generator {generator}, {len(keys)} API keys, listening on http://{args.host}:{args.port}"
              + (f", traces to {tracing.settings.endpoint}" if tracing is not None else ""),
              file=sys.stderr, flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5)
    return 0
