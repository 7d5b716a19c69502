"""Assembles a `RagService` from what the plan door hands over (ragopt.plan.serving.open_service_plan): the plan's
steps over the knowledge base's index grouped by slot, as a sweep trial is assembled. The steps that give the hits
are cached per question; history, each backend's prompt and generator (behind its breaker and fallbacks) and
citation attribution answer. The plan is a sweep's trial (`--from results.json`, `--plan plan.toml`, checked
against what it was measured on) or the one the flags describe (`--model`, `--engine`, the retrieval flags: see
ragopt.cli.serve); either way it is built the same way. Here: the caches on diskcache or Redis, and the guards."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragopt.cache import open_store
from ragopt.errors import InputError
from ragopt.plan.serving import ServiceSource
from ragopt.serve.caches import ServeCaches
from ragopt.serve.service import RagService, ServeSettings


@dataclass(kw_only=True)
class ServeOptions(ServiceSource):
    """What is served (the plan and its documents: ServiceSource) and how."""

    settings: ServeSettings
    redis_url: str | None = None
    cache: bool = True


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
    from ragopt.plan.serving import open_service_plan
    from ragopt.resources import Resources

    settings = opts.settings
    redis_client = _redis(opts, stack)
    resources = stack.enter_context(Resources())
    served = open_service_plan(opts, workspace, resources)
    if served.small_max_words is not None:  # what the plan's trial measured, not the flags' default
        settings = settings.model_copy(update={"small_max_words": served.small_max_words})
    caches = ServeCaches(open_store(opts.redis_url, workspace / "serve-cache"), settings.answer_ttl_s,
                         settings.retrieval_ttl_s, enabled=opts.cache)
    stack.callback(caches.close)
    service = RagService(served.retrieval, served.backends, served.extractive, settings, caches, served.kb_version,
                         served.retrieval_id, redis_client=redis_client, kv_bytes_per_sequence=served.kv_bytes,
                         before=served.before, after=served.after)
    service.servers = served.servers  # the llama-server children by backend name (health, fault injection in tests)
    service.warm()
    return service
