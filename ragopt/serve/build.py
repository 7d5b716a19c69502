"""Assembles a `RagService` through the plan door (ragopt.plan), as a sweep trial is assembled: the plan's steps
over the knowledge base's index, grouped by slot. The steps that give the hits (rewrite, retrieval, rerank,
compression: `HITS_SLOTS`) are cached per question; history, the prompt and the generator (behind its breaker
and fallbacks) and citation attribution answer. The plan is a sweep's trial (`--from results.json`, `--plan
plan.toml`, checked against what it was measured on) or the one the flags describe (`--model`, `--engine`, the
retrieval flags: see ragopt.cli.serve); either way it is built the same way. Caches on diskcache or Redis, and
the guards. Everything a plan names is checked before a model is loaded or a server started."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragopt.cache import open_store
from ragopt.config import ChunkerConfig, StoreConfig, needs_vectors
from ragopt.documents import DocsOptions, corpus_documents
from ragopt.errors import InputError
from ragopt.plan.model import PlanConfig
from ragopt.plan.saved import SavedPlan
from ragopt.serve.caches import ServeCaches
from ragopt.serve.service import Backend, RagService, ServeSettings
from ragopt.stages.spec import AFTER_GENERATION, BEFORE_GENERATION, GENERATE_SLOT, GENERATION_SLOTS, HITS_SLOTS


@dataclass
class ServeOptions:
    settings: ServeSettings
    plan: PlanConfig | None = None  # what is served; None: the saved plan's, else the default plan
    saved: SavedPlan | None = None  # where the plan came from when a sweep measured it (--from / --plan): checked
    small_model: str | None = None  # a second backend: the plan's generator with this GGUF, for short questions
    dataset: str | None = None
    docs: DocsOptions | None = None  # your own documents instead of a dataset's corpus
    split: str = "test"
    auto_retriever: bool = False  # --retriever auto: see ragopt.backends.embeddings.auto_retrieval
    embedder_given: bool = False  # --embedder named one: auto keeps it
    store: StoreConfig = field(default_factory=StoreConfig)
    redis_url: str | None = None
    cache: bool = True

    def __post_init__(self) -> None:
        if self.plan is None:
            self.plan = self.saved.plan if self.saved is not None else PlanConfig(chunker=ChunkerConfig(mode="whole"))


@dataclass
class PlanParts:
    retrieval: list[Any]  # the steps of HITS_SLOTS
    before: list[Any]  # history: after the cached hits, before the prompt
    backends: dict[str, Backend]  # the plan's own prompt + generator by route ("default", "small")
    after: list[Any]  # citation attribution
    kb_version: str  # the index fingerprint ("no-kb" without documents)
    retrieval_id: str  # what identifies the retrieval steps (their config), part of the retrieval-cache key
    kv_bytes: float | None = None
    small_max_words: int | None = None  # the plan's own routing limit, when it routes to the extractive answer


def _documents(opts: ServeOptions) -> list[Any] | None:
    """The knowledge base: --dataset/--docs when given, else the saved plan's own dataset (checked against the
    corpus it was measured on), else none."""
    if opts.dataset or opts.docs:
        if opts.saved is not None:
            print("note: serving the plan over other documents than it was measured on", file=sys.stderr)
        return corpus_documents(opts.dataset, opts.split, opts.docs, log=lambda line: print(line, file=sys.stderr))
    if opts.saved is not None:
        from ragopt.plan.saved import load_documents

        return load_documents(opts.saved)
    return None


def _plan_parts(opts: ServeOptions, workspace: Path, resources: Any) -> PlanParts:
    """The plan's steps over the knowledge base's index, grouped for the service (see HITS_SLOTS)."""
    from ragopt.index import build_index, make_embedder
    from ragopt.plan import check_plans, check_saved, spec_for, steps_by_slot

    plan = opts.plan
    assert plan is not None
    check_plans([plan])  # a missing model or glossary is one line before anything is read or built
    documents = _documents(opts)
    if opts.saved is None and opts.auto_retriever and documents is not None:
        from ragopt.backends.embeddings import auto_retrieval

        retrieval, embedder_config, note = auto_retrieval(plan.retrieval, plan.embedder, (d.text for d in documents),
                                                          embedder_given=opts.embedder_given)
        if note:
            print(note, file=sys.stderr)
        plan = plan.model_copy(update={"retrieval": retrieval, "embedder": embedder_config})
    elif opts.saved is None and documents is not None:  # a named retriever: see embedder_for
        from ragopt.backends.embeddings import embedder_for

        embedder_config, note = embedder_for(plan.retrieval.retriever, plan.embedder, (d.text for d in documents),
                                             embedder_given=opts.embedder_given)
        if note:
            print(note, file=sys.stderr)
            plan = plan.model_copy(update={"embedder": embedder_config})
    plans, small_max_words = _backend_plans(plan, opts.small_model)
    embedder = make_embedder(workspace, plan.embedder, resources)
    if opts.saved is not None:  # before any index is built or model loaded
        check_saved(opts.saved, documents if not (opts.dataset or opts.docs) else None, embedder.fingerprint)
    index, kb_version = None, "no-kb"
    if documents is not None:
        report = build_index(documents, plan.chunker, embedder, workspace, store_config=opts.store, resources=resources,
                             dense=needs_vectors(plan.retrieval.retriever), progress=False)
        index, kb_version = report.index, report.index.manifest.id
        print(f"index {kb_version}: {index.manifest.n_chunks} chunks; embedded {report.embedded} texts, "
              f"{report.cache_hits} from cache", file=sys.stderr)
    slots = {route: steps_by_slot(p, index, embedder, workspace, resources=resources, cache_queries=True, skippable=True)
             for route, p in plans.items()}
    served = {route: _backend(route, p, slots[route]) for route, p in plans.items()}
    by_slot = slots["default"]
    retrieval_id = plan.model_copy(update={"stages": {k: v for k, v in plan.stages.items()
                                                      if spec_for(k).slot in HITS_SLOTS}}).fingerprint()
    return PlanParts([s for slot in HITS_SLOTS for s in by_slot[slot]], [s for slot in BEFORE_GENERATION for s in by_slot[slot]],
                     {route: backend for route, (backend, _) in served.items()},
                     [s for slot in AFTER_GENERATION for s in by_slot[slot]],
                     kb_version, retrieval_id if index is not None else "no-retrieval", served["default"][1], small_max_words)


def _backend_plans(plan: PlanConfig, small_model: str | None) -> tuple[dict[str, PlanConfig], int | None]:
    """The plans of the backends by route: the plan's own ("default") and, for short questions, the same with
    --small-model; or, for a plan that routes them to the extractive answer (a sweep's routed trial), the plan
    without routing and its extractive generator, with the word limit it routes by (else None: the flags')."""
    from ragopt.plan import kind_in_slot

    kind = kind_in_slot(GENERATE_SLOT)
    generate = plan.stage_config(kind) if kind in plan.stages else None
    if generate is None or not generate.routes():
        return {"default": plan, **({"small": _with_model(plan, small_model)} if small_model else {})}, None
    if small_model:
        raise InputError(f"the plan routes short questions to the extractive answer (stages.{kind}.route_small_max_words)"
                         ": serve it without a small model", field="--small-model")

    def with_generate(**values: Any) -> PlanConfig:
        return plan.model_copy(update={"stages": {**plan.stages, kind: {**plan.stages[kind], **values}}})

    backends = {"default": with_generate(route_small_max_words=0), "small": with_generate(generator="extractive")}
    return backends, generate.route_small_max_words


def _with_model(plan: PlanConfig, model: str) -> PlanConfig:
    """The plan with its generator's model replaced (the --small-model route)."""
    from ragopt.plan import kind_in_slot

    kind = kind_in_slot(GENERATE_SLOT)
    small = plan.model_copy(update={"stages": {**plan.stages, kind: {**plan.stages.get(kind, {}), "model": model}}})
    if not small.stage_config(kind).brings_prompt():
        raise InputError("needs a plan whose generator is an LLM (--engine inprocess or llama-server)", field="--small-model")
    return small


def _backend(route: str, plan: PlanConfig, by_slot: dict[str, list[Any]]) -> tuple[Backend, float | None]:
    """The plan's prompt and generator as one backend (the generator unwrapped from its Step: serve adds its own
    breaker and fallbacks) with what identifies its answers, as the generator's spec says; a plan that
    generates nothing answers extractively."""
    from ragopt.pipeline import Step
    from ragopt.plan import spec_for
    from ragopt.stages.generate_extractive import ExtractiveGenerator
    from ragopt.stages.prompt import BuildPrompt

    stages = [s.stage if isinstance(s, Step) else s for slot in GENERATION_SLOTS for s in by_slot[slot]]
    served = [spec_for(k).served(plan.stage_config(k)) for k in sorted(plan.stages) if spec_for(k).served is not None]
    identity = next((s for s in served if s is not None), None)
    if identity is None or not stages:
        print("note: the plan generates nothing: answering with sentences of the passages (extractive)", file=sys.stderr)
        return Backend(route, [ExtractiveGenerator(name="generate")], "extractive", "extractive"), None
    prompt = next((s for s in stages if isinstance(s, BuildPrompt)), None)
    version = prompt.config.prompt_version if prompt is not None else "no-prompt"
    return Backend(route, stages, identity.model_id, version), identity.kv_bytes_per_sequence


def _redis(opts: ServeOptions, stack: ExitStack) -> Any:
    if not opts.redis_url:
        return None
    import redis

    client = redis.Redis.from_url(opts.redis_url, decode_responses=True)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise InputError(f"cannot reach Redis: {exc}", field="--redis") from None
    stack.callback(client.close)
    return client


def build_service(opts: ServeOptions, workspace: Path, stack: ExitStack) -> RagService:
    """The service; child processes, stores and models it opens are closed by `stack`."""
    from ragopt.resources import Resources
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    if opts.dataset is not None and not Path(opts.dataset).exists():
        raise InputError("dataset not found", path=opts.dataset, field="--dataset")
    settings = opts.settings
    redis_client = _redis(opts, stack)
    resources = stack.enter_context(Resources())
    parts = _plan_parts(opts, workspace, resources)
    if parts.small_max_words is not None:  # what the plan's trial measured, not the flags' default
        settings = settings.model_copy(update={"small_max_words": parts.small_max_words})
    caches = ServeCaches(open_store(opts.redis_url, workspace / "serve-cache"), settings.answer_ttl_s,
                         settings.retrieval_ttl_s, enabled=opts.cache)
    stack.callback(caches.close)
    service = RagService(parts.retrieval, parts.backends, ExtractiveGenerator(), settings, caches, parts.kb_version,
                         parts.retrieval_id, redis_client=redis_client, kv_bytes_per_sequence=parts.kv_bytes,
                         before=parts.before, after=parts.after)
    # the llama-server children by backend name (health, fault injection in tests)
    service.servers = {name: server for name, b in parts.backends.items() if (server := getattr(b.stages[-1], "server", None))}
    service.warm()
    return service
