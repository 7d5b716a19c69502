"""Bounded rerank: a cross-encoder scores at most `depth` fused candidates, in batches, within a time budget.

Candidates are scored best-fused first, so when the per-query budget (or the request's deadline) runs out
the ones left unscored are the least promising; they keep their fused order behind the scored ones. A
weak reranker alone can undo good retrieval, so its scores may be fused with the fused order instead of
replacing it (`fusion`). The trace shows how many were scored, the order before and after, and whether
the budget ran out.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Literal, Sequence

from pydantic import model_validator

from ragopt.config import DEFAULT_EMBEDDER, StrictModel, knob, trained_split
from ragopt.errors import InputError
from ragopt.fusion import convex, rrf
from ragopt.pipeline import RequestState
from ragopt.resources import Resources
from ragopt.stages.spec import BuildContext, ModelFile, Plan, StageSpec
from ragopt.types import Hit

MAX_DEPTH = 200  # a hard cap: a cross-encoder costs a forward pass per candidate
_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")

Fusion = Literal["none", "rrf", "convex"]


def check_model_reference(model: str, field: str) -> None:
    """A model named by path must be a model folder; a hub name ("org/name") is left to the loader. A name
    that can only be a path (absolute, ./, ~, several slashes, or under an existing folder) and is missing
    is an InputError naming `field`, raised before any work starts."""
    if model == DEFAULT_EMBEDDER:
        return
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise InputError("not a model folder (no config.json in it)", path=model, field=field)
        return
    first = model.split("/")[0]
    only_a_path = (
        path.is_absolute() or model.startswith((".", "~")) or "\\" in model or model.count("/") > 1
        or ("/" in model and Path(first).is_dir())
    )
    if only_a_path or not _HUB_NAME.fullmatch(model):
        raise InputError("no model folder at this path", path=model, field=field)


class RerankConfig(StrictModel):
    model: str | None = knob(None, description="a CrossEncoder folder (e.g. from `ragopt train-reranker`) or hub name")
    depth: int = knob(0, sweep=[0, 20, 50, 100], ge=0, le=MAX_DEPTH, description="fused candidates scored; 0 = off")
    max_length: int = knob(256, ge=16, le=512, description="tokens per (query, passage) pair; passages are cut to fit")
    batch_size: int = knob(16, ge=1, description="pairs per forward pass; the budget is checked between batches")
    budget_ms: float | None = knob(None, gt=0, description="scoring time per query; unscored candidates keep their fused order")
    fusion: Fusion = knob("none", description="none: rerank scores alone; rrf/convex: combined with the fused order")
    weight: float = knob(0.5, ge=0, le=1, description="convex fusion: weight of the rerank score")
    rrf_k: int = knob(60, gt=0, description="RRF constant when fusion is rrf")
    device: str = "cpu"

    @model_validator(mode="after")
    def _model_when_on(self) -> "RerankConfig":
        if self.depth > 0 and self.model is None:
            raise ValueError("a reranker model is required when depth > 0")
        return self


def reorder(hits: list[Hit], scores: Sequence[float], fusion: Fusion, weight: float, rrf_k: int, label: str) -> list[Hit]:
    """The first len(scores) hits (the scored ones) ranked by their scores, alone or fused with their fused
    order; the rest follow in fused order. Output scores fall monotonically down the list (unscored hits
    get scores below the lowest scored one), so a TREC run sorted by score keeps this order."""
    scored = hits[: len(scores)]
    by_id = {h.chunk.id: h for h in scored}
    reranked = sorted(((h.chunk.id, float(s)) for h, s in zip(scored, scores)), key=lambda kv: -kv[1])
    before = [(h.chunk.id, h.score) for h in scored]
    if fusion == "rrf":
        ranked = rrf([reranked, before], rrf_k=rrf_k)
    elif fusion == "convex":
        ranked = convex(reranked, before, alpha=weight)
    else:
        ranked = reranked
    out = [by_id[cid].model_copy(update={"score": score, "retriever": label}) for cid, score in ranked]
    floor = min((s for _, s in ranked), default=0.0)
    out += [h.model_copy(update={"score": floor - i}) for i, h in enumerate(hits[len(scores) :], start=1)]
    return [h.model_copy(update={"rank": r}) for r, h in enumerate(out, start=1)]


def record(state: RequestState, before: list[Hit], scored: int, exhausted: bool) -> None:
    """Trace attributes shared by the rerank stages: scored count, order before/after, budget exhausted."""
    n = len(before)
    state.usage.attrs.update(
        scored=scored,
        order_before=[h.chunk.id for h in before],
        order_after=[h.chunk.id for h in state.hits[:n]],
        budget_exhausted=exhausted,
    )


class CrossEncoderRerank:
    """Pipeline stage: reorder the top `depth` hits by a sentence-transformers CrossEncoder."""

    reads = ("hits", "query")
    span_kind = "RERANKER"  # OpenInference's word for it (ragopt.trace.Span.kind)
    writes = ("hits",)

    def __init__(self, config: RerankConfig | None = None, resources: Resources | None = None, name: str = "rerank"):
        self.config = config or RerankConfig()
        if self.config.model is not None:
            check_model_reference(self.config.model, "rerank.model")
        self.resources = resources if resources is not None else Resources()
        self.name = name

    @property
    def model(self):  # type: ignore[no-untyped-def]
        from ragopt.backends.embeddings import resolve_model_path

        assert self.config.model is not None
        return self.resources.cross_encoder(resolve_model_path(self.config.model), self.config.max_length, self.config.device)

    def budget_s(self, state: RequestState) -> float | None:
        """The tighter of the stage's own budget and the time left before the request's deadline."""
        limits = [x for x in (self.config.budget_ms and self.config.budget_ms / 1000, state.remaining_s()) if x is not None]
        return min(limits) if limits else None

    def run(self, state: RequestState) -> RequestState:
        c = self.config
        candidates = state.hits[: c.depth]
        if not candidates:
            record(state, [], 0, False)
            return state
        model = self.model  # loaded before the budget clock starts: a model load is not scoring time
        pairs = [(state.query.text, h.chunk.indexed_text) for h in candidates]
        budget = self.budget_s(state)
        scores: list[float] = []
        exhausted = False
        started, slowest = time.monotonic(), 0.0  # the budget's own clock; the pipeline times the span
        for b in range(0, len(pairs), c.batch_size):
            elapsed = time.monotonic() - started
            # At least one batch is scored; after that stop before a batch that would likely overrun.
            if budget is not None and scores and elapsed + slowest > budget:
                exhausted = True
                break
            t = time.monotonic()
            batch = model.predict(pairs[b : b + c.batch_size], batch_size=c.batch_size, show_progress_bar=False)
            scores.extend(float(s) for s in batch)
            slowest = max(slowest, time.monotonic() - t)
        state.hits = reorder(state.hits, scores, c.fusion, c.weight, c.rrf_k, self.name)
        record(state, candidates, len(scores), exhausted)
        return state


def _build(config: RerankConfig, ctx: BuildContext) -> CrossEncoderRerank | None:
    return CrossEncoderRerank(config, ctx.resources) if config.depth else None


def _check(config: RerankConfig, plan: Plan) -> None:
    if config.model is not None and trained_split(config.model) is None:  # "trained:SPLIT": trained by the sweep
        check_model_reference(config.model, "model")


def _models(config: RerankConfig) -> dict[str, ModelFile]:
    """The cross-encoder's folder by its files' fingerprint; a hub name, whose files are not here, by name."""
    if config.model is None or not config.depth:
        return {}
    from ragopt.backends.embeddings import model_fingerprint

    try:
        return {"rerank": ModelFile(config.model, model_fingerprint(config.model))}
    except ValueError:
        return {"rerank": ModelFile(config.model, "hub:" + config.model)}


SPEC = StageSpec("rerank", RerankConfig, _build, slot="rerank", check=_check, wants=lambda config: config.depth,
                 models=_models, skippable=True, trained_reranker="model")
