"""What a server serves, opened through the door: `open_service_plan(source, workspace, resources)` builds (or
reuses) the knowledge base's index and the plan's steps over it, as a sweep trial is built, and hands them over
grouped for serving (`ServedPlan`): the steps that give the hits (rewrite, retrieval, rerank, compression:
`HITS_SLOTS`), which a server caches per question; history and a tool's call before generation; the prompt and
generator of each backend by route; citation attribution after. With them come what a server keys its caches by
(the index's fingerprint, the retrieval steps' config, each backend's model and prompt version), the KV memory
one sequence takes, and the child servers the plan started. `ragopt.serve` builds its service from this alone.

The plan is a sweep's trial (checked against what it was measured on) or the one a server's flags describe;
everything it names is checked before a model is loaded or a server started."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ragopt.config import ChunkerConfig, StoreConfig, needs_vectors
from ragopt.errors import BadRequest, InputError
from ragopt.plan.model import PlanConfig
from ragopt.plan.saved import SavedPlan
from ragopt.stages.spec import AFTER_GENERATION, BEFORE_GENERATION, GENERATE_SLOT, GENERATION_SLOTS, HITS_SLOTS
from ragopt.types import Sampling


@dataclass(kw_only=True)
class ServiceSource:
    """What is served, over which documents."""

    plan: PlanConfig | None = None  # None: the saved plan's, else the default plan
    saved: SavedPlan | None = None  # where the plan came from when a sweep measured it (--from / --plan): checked
    small_model: str | None = None  # a second backend: the plan's generator with this GGUF, for short questions
    dataset: str | None = None
    docs: Any = None  # a ragopt.documents.DocsOptions: your own documents instead of a dataset's corpus
    split: str = "test"
    auto_retriever: bool = False  # --retriever auto: see ragopt.backends.embeddings.auto_retrieval
    embedder_given: bool = False  # --embedder named one: auto keeps it
    store: StoreConfig = field(default_factory=StoreConfig)

    def __post_init__(self) -> None:
        if self.plan is None:
            self.plan = self.saved.plan if self.saved is not None else PlanConfig(chunker=ChunkerConfig(chunker="whole"))


@dataclass
class Backend:
    """A generation backend: the stages from fitted prompt to answer, and what identifies its answers."""

    name: str
    stages: Sequence[Any]  # [prompt stage, generator] (or a generator that builds its own prompt)
    model_id: str  # fingerprint of weights + settings: part of every answer-cache key
    prompt_version: str

    def check_sampling(self, sampling: Sampling | None) -> None:
        """Its generator refuses a sampling field it cannot honour (BadRequest naming it); a generator that says
        nothing of sampling is taken to honour none: a field is refused, never dropped."""
        if sampling is None:
            return
        check = getattr(self.stages[-1], "check_sampling", None)
        if check is not None:
            check(sampling)
        elif sampling.asked():
            raise BadRequest(sampling.asked()[0], f"the {self.name!r} generator takes no sampling options", "unsupported_value")


@dataclass
class ServedPlan:
    retrieval: list[Any]  # the steps of HITS_SLOTS
    before: list[Any]  # history and a tool's call: after the cached hits, before the prompt
    backends: dict[str, Backend]  # the plan's own prompt + generator by route ("default", "small")
    after: list[Any]  # citation attribution
    extractive: Any  # the answer of last resort, when every backend failed
    kb_version: str  # the index fingerprint ("no-kb" without documents)
    retrieval_id: str  # what identifies the retrieval steps (their config), part of the retrieval-cache key
    kv_bytes: float | None = None
    small_max_words: int | None = None  # the plan's own routing limit, when it routes to the extractive answer
    servers: dict[str, Any] = field(default_factory=dict)  # child llama-servers by backend name (health, tests)


def _documents(source: ServiceSource) -> list[Any] | None:
    """The knowledge base: --dataset/--docs when given, else the saved plan's own dataset (checked against the
    corpus it was measured on), else none."""
    from ragopt.documents import corpus_documents

    if source.dataset or source.docs:
        if source.saved is not None:
            print("note: serving the plan over other documents than it was measured on", file=sys.stderr)
        return corpus_documents(source.dataset, source.split, source.docs, log=lambda line: print(line, file=sys.stderr))
    if source.saved is not None:
        from ragopt.plan.saved import load_documents

        return load_documents(source.saved)
    return None


def _retrieval_choice(source: ServiceSource, plan: PlanConfig, documents: list[Any]) -> PlanConfig:
    """The plan with the retriever and embedder --retriever auto (or a named retriever) picks for these documents."""
    from ragopt.backends.embeddings import auto_retrieval, embedder_for

    texts = (d.text for d in documents)
    if source.auto_retriever:
        retrieval, embedder_config, note = auto_retrieval(plan.retrieval, plan.embedder, texts, embedder_given=source.embedder_given)
        update = {"retrieval": retrieval, "embedder": embedder_config}
    else:  # a named retriever: see embedder_for
        embedder_config, note = embedder_for(plan.retrieval.retriever, plan.embedder, texts, embedder_given=source.embedder_given)
        update = {"embedder": embedder_config} if note else {}
    if note:
        print(note, file=sys.stderr)
    return plan.model_copy(update=update)


def open_service_plan(source: ServiceSource, workspace: Path, resources: Any) -> ServedPlan:
    """The plan's steps over the knowledge base's index, grouped for serving (see the module's docstring)."""
    from ragopt.index import build_index, make_embedder
    from ragopt.plan import check_plans, check_saved, spec_for, steps_by_slot
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    if source.dataset is not None and not Path(source.dataset).exists():
        raise InputError("dataset not found", path=source.dataset, field="--dataset")
    plan = source.plan
    assert plan is not None
    check_plans([plan])  # a missing model or glossary is one line before anything is read or built
    documents = _documents(source)
    if source.saved is None and documents is not None:
        plan = _retrieval_choice(source, plan, documents)
    plans, small_max_words = _backend_plans(plan, source.small_model)
    embedder = make_embedder(workspace, plan.embedder, resources)
    if source.saved is not None:  # before any index is built or model loaded
        check_saved(source.saved, documents if not (source.dataset or source.docs) else None, embedder.fingerprint)
    index, kb_version = None, "no-kb"
    if documents is not None:
        report = build_index(documents, plan.chunker, embedder, workspace, store_config=source.store, resources=resources,
                             dense=needs_vectors(plan.retrieval.retriever), progress=False)
        index, kb_version = report.index, report.index.manifest.id
        print(f"index {kb_version}: {index.manifest.n_chunks} chunks; embedded {report.embedded} texts, "
              f"{report.cache_hits} from cache", file=sys.stderr)
        warning = report.reach_warning(embedder) if needs_vectors(plan.retrieval.retriever) else None
        if warning:
            print(warning, file=sys.stderr)
    slots = {route: steps_by_slot(p, index, embedder, workspace, resources=resources, cache_queries=True, skippable=True)
             for route, p in plans.items()}
    served = {route: _backend(route, p, slots[route]) for route, p in plans.items()}
    by_slot = slots["default"]
    retrieval_id = plan.model_copy(update={"stages": {k: v for k, v in plan.stages.items()
                                                      if spec_for(k).slot in HITS_SLOTS}}).fingerprint()
    backends = {route: backend for route, (backend, _) in served.items()}
    return ServedPlan(
        [s for slot in HITS_SLOTS for s in by_slot[slot]], [s for slot in BEFORE_GENERATION for s in by_slot[slot]], backends,
        [s for slot in AFTER_GENERATION for s in by_slot[slot]], ExtractiveGenerator(), kb_version,
        retrieval_id if index is not None else "no-retrieval", served["default"][1], small_max_words,
        {name: server for name, b in backends.items() if (server := getattr(b.stages[-1], "server", None))})


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
    """The plan's prompt and generator as one backend (the generator unwrapped from its Step: a server adds its
    own breaker and fallbacks) with what identifies its answers, as the generator's spec says; a plan that
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
