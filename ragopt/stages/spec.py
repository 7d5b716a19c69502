"""What a stage module declares about its stage kind: a `StageSpec` named `SPEC` (or several, `SPECS`) beside its
config and its stage, the way a Haystack `@component` declares itself where it is defined. The registry
(ragopt.plan.registry) collects them; nothing else lists stage kinds.

A spec names its config model (whose `knob()` fields are what a sweep may vary), the slot that places it in the
chain, a builder, and what the rooms above ask of it: the checks run before any work, how many candidates it
wants, the model files it loads (provenance), whether it writes answers, whether a request survives its failure.

Chain order, by slot: rewrite -> retrieval (embed, vector, bm25, fuse) -> rerank -> widen (small-to-big) ->
compress -> history -> prompt -> generate -> cite. Within a slot, stages run in the order of their kind names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Protocol

from ragopt.config import ChunkerConfig, EmbedderConfig, RetrievalConfig, StrictModel

if TYPE_CHECKING:
    from ragopt.backends.embeddings import Embedder
    from ragopt.index import Index
    from ragopt.pipeline import Stage, Step
    from ragopt.resources import Resources
    from ragopt.text import Analyzer

SLOTS = ("rewrite", "retrieval", "rerank", "widen", "compress", "history", "prompt", "generate", "cite")
PROMPT_SLOT, GENERATE_SLOT, CITE_SLOT = "prompt", "generate", "cite"  # the kind in each: see plan.registry.kind_in_slot
CUT_SLOT = "rerank"  # where a list retrieved deeper than top_k for a stage's `wants` is cut back to top_k
HITS_SLOTS = SLOTS[: SLOTS.index("compress") + 1]  # their output is the hits: what a retrieval cache may keep
GENERATION_SLOTS = ("prompt", "generate")  # a prompt and the generator reading it: one backend when served
BEFORE_GENERATION = SLOTS[len(HITS_SLOTS): SLOTS.index(GENERATION_SLOTS[0])]  # after the hits, before the prompt
AFTER_GENERATION = SLOTS[SLOTS.index(GENERATION_SLOTS[-1]) + 1:]  # reads the answer
ROUTED = "routed"  # a config's routing when a router picks the backend per question (see StageSpec.routing)


class Plan(Protocol):
    """What a stage may read of the whole plan (ragopt.plan.PlanConfig, a room above, satisfies it)."""

    chunker: ChunkerConfig
    embedder: EmbedderConfig
    retrieval: RetrievalConfig
    stages: dict[str, dict[str, Any]]

    def stage_config(self, kind: str) -> Any: ...

    def generates(self) -> bool: ...


@dataclass
class BuildContext:
    """What a stage builder may use: the open index and embedder of this plan, and the process's resources."""

    index: "Index | None"
    embedder: "Embedder"
    resources: "Resources"
    workspace: Path
    plan: Plan
    retrieval: list[Any] = field(default_factory=list)  # the retrieval stages, for stages that wrap them

    def analyzer(self) -> "Analyzer | None":
        """BM25's analyzer over this plan's index: stages that match words (attribution, the extractive
        generator, compression's BM25 scorer, the glossary) use it too. None without an index."""
        return self.index.analyzer(self.plan.retrieval.bm25) if self.index is not None else None


Builder = Callable[[Any, BuildContext], "Stage | Step | list[Stage | Step] | None"]


@dataclass(frozen=True)
class ModelFile:
    """A model a stage loads, by the fingerprint of its files (a hub name, whose files are not here, by name)."""

    name: str
    fingerprint: str


@dataclass(frozen=True)
class Served:
    """What a server needs of a generator config: what identifies its answers (weights and settings: part of every
    answer-cache key) and the KV memory one sequence holds (admission; None when the model is not ours)."""

    model_id: str
    kv_bytes_per_sequence: float | None


@dataclass(frozen=True)
class StageSpec:
    kind: str  # the key under [stages] in a sweep config, and the prefix of its knobs ("rerank.depth")
    config: type[StrictModel]
    build: Builder  # returns the stage(s), or None when this config switches the stage off
    slot: str
    replaces_retrieval: bool = False  # a builder that wraps ctx.retrieval (e.g. multi-query) stands in for it
    # checks a config against what it names (files, models, token budgets) before any work starts; InputError
    check: Callable[[Any, Plan], None] | None = None
    # how many retrieved candidates this stage wants to see (a reranker's depth); the plan retrieves that many
    # and cuts back to its top_k after the stage
    wants: Callable[[Any], int] | None = None
    # the model files this config loads, by role ("generator", "rerank", ...): what a saved plan's provenance
    # records and `serve --from` checks
    models: Callable[[Any], Mapping[str, ModelFile]] | None = None
    # a generator's identity and KV need when served (ragopt.serve); None for stages that write no answer
    served: Callable[[Any], Served | None] | None = None
    # whether this config writes `state.answer` (judged metrics and the sweep's answer columns need one)
    answers: Callable[[Any], bool] | None = None
    # a request survives this stage's failure (the hits before it still answer): a server skips it, visibly
    skippable: bool = False
    # the knobs this config leaves without effect (an LLM's knobs when the extractive generator answers): a sweep
    # puts them back to their defaults, so they multiply no trials
    ignores: Callable[[Any], Collection[str]] | None = None
    # which backend answers this config's questions, in ragopt.text.routing's names ("small", "default"), ROUTED when
    # a router picks one per question, None when it answers nothing: a sweep with a routed trial reports every
    # trial's share of questions sent to the small backend
    routing: Callable[[Any], str | None] | None = None
    # the config field naming a cross-encoder, which a sweep may give as "trained:SPLIT" (ragopt.train.reranker)
    trained_reranker: str | None = None

    def __post_init__(self) -> None:
        if self.slot not in SLOTS:
            raise ValueError(f"slot must be one of {SLOTS}, got {self.slot!r}")
