"""What an optional stage kind declares: its config model (whose `knob()` fields are what a sweep may vary), the
slot that places it in the chain, a builder, and optional checks. Chain order, by slot: rewrite -> retrieval
(embed, vector, bm25, fuse) -> rerank -> compress -> history -> prompt -> generate -> cite."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ragopt.config import StrictModel

if TYPE_CHECKING:
    from ragopt.backends.embeddings import Embedder
    from ragopt.index import Index
    from ragopt.pipeline import Stage, Step
    from ragopt.plan.model import PlanConfig
    from ragopt.resources import Resources
    from ragopt.text import Analyzer

SLOTS = ("rewrite", "retrieval", "rerank", "compress", "history", "prompt", "generate", "cite")


@dataclass
class BuildContext:
    """What a stage builder may use: the open index and embedder of this plan, and the process's resources."""

    index: "Index | None"
    embedder: "Embedder"
    resources: "Resources"
    workspace: Path
    plan: "PlanConfig"
    retrieval: list[Any] = field(default_factory=list)  # the retrieval stages, for stages that wrap them

    def analyzer(self) -> "Analyzer | None":
        """BM25's analyzer over this plan's index: stages that match words (attribution, the extractive
        generator, compression's BM25 scorer, the glossary) use it too. None without an index."""
        return self.index.analyzer(self.plan.retrieval.bm25) if self.index is not None else None


Builder = Callable[[Any, BuildContext], "Stage | Step | list[Stage | Step] | None"]


@dataclass(frozen=True)
class StageSpec:
    kind: str  # the key under [stages] in a sweep config, and the prefix of its knobs ("rerank.depth")
    config: type[StrictModel]
    build: Builder  # returns the stage(s), or None when this config switches the stage off
    slot: str
    replaces_retrieval: bool = False  # a builder that wraps ctx.retrieval (e.g. multi-query) stands in for it
    # checks a config against what it names (files, models, token budgets) before any work starts; InputError
    check: Callable[[Any, "PlanConfig"], None] | None = None
    # how many retrieved candidates this stage wants to see (a reranker's depth); the plan retrieves that many
    # and cuts back to its top_k after the stage
    wants: Callable[[Any], int] | None = None

    def __post_init__(self) -> None:
        if self.slot not in SLOTS:
            raise ValueError(f"slot must be one of {SLOTS}, got {self.slot!r}")
