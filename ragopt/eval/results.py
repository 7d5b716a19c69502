"""The `results.json` schema of a sweep (schema_version 1), as pydantic models. Documented in docs/results-schema.md;
the file is read (and its version checked) by ragopt.plan.results_file, the one reader.

Stable means: fields are only ever added in version 1 (readers should ignore keys they do not know in the
open dicts: `params`, `costs`, `metrics`, `per_query`, `versions.packages`, `models`); renaming or removing a
field, or changing its meaning, bumps `schema_version`.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ragopt.config import validate
from ragopt.plan.results_file import SCHEMA_VERSION, read_results

DEFAULT_PACKAGES = (
    "pydantic", "numpy", "qdrant-client", "bm25s", "rank-bm25", "sentence-transformers", "torch", "tokenizers",
    "ragas", "llama-cpp-python",
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    """Documented fields plus any extra ones (later stages add knobs and costs)."""

    model_config = ConfigDict(extra="allow")


class DatasetInfo(_Model):
    name: str
    path: str
    fingerprint: str
    n_documents: int
    n_queries: int
    generated: str | None = Field(None, description="for a generated set (ragopt synth): how its questions were made")


class Versions(_Model):
    ragopt: str
    python: str
    packages: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def collect(cls, packages: Iterable[str] = DEFAULT_PACKAGES) -> "Versions":
        """The running versions: ragopt, Python, and each named package that is installed."""
        from ragopt import __version__

        found = {}
        for name in packages:
            try:
                found[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return cls(ragopt=__version__, python=platform.python_version(), packages=found)


class ModelInfo(_Model):
    name: str
    fingerprint: str


class TrialParams(_Open):
    chunker: str = Field(description='"whole" or "SIZE/OVERLAP" in tokens, e.g. "256/32"')
    chunk_size: int | None = None
    chunk_overlap: int | None = None
    retriever: str
    fusion: str | None = None
    alpha: float | None = None
    top_k: int


class Costs(_Open):
    """Measured costs; None when not measured. Latencies are retrieval per query, in milliseconds."""

    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    context_tokens: float | None = Field(None, description="mean tokens of the fitted prompt the generator receives (layout, titles, numbering, cut passages)")
    index_build_s: float | None = None
    index_bytes: int | None = None
    n_chunks: int | None = None
    chunks_cut: float | None = Field(None, description="dense and hybrid trials: the share of chunks longer than the "
                                                       "embedder reads, embedded from their beginning only")


COST_NAMES = tuple(Costs.model_fields)  # the documented costs: lower is better
# A metric of sweeps with a routed trial: the share of questions the small backend answered (ragopt.text.routing);
# the cost side of routing's quality-cost curve (higher is cheaper), 1 for the extractive generator, 0 for an LLM alone
ROUTED_SMALL_SHARE = "routed_small_share"


def measured(value: Any) -> float | None:
    """A value as a float, or None when it was not measured (None, NaN, or not a number)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _nan_to_none(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


class Interval(_Model):
    mean: float
    low: float
    high: float


class Generations(_Model):
    """What a sweep's answers cost: answers made (a trial's answer to a question, however obtained), generator calls
    made by this run (the rest were remembered from the same passages or read back from an earlier run), tokens."""

    answers: int = 0
    generated: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def plus(self, other: "Generations") -> "Generations":
        return Generations(**{name: getattr(self, name) + getattr(other, name) for name in Generations.model_fields})


class RaceInfo(_Model):
    """A raced trial: how far it got. A dropped trial's answer figures are over the questions it answered only."""

    status: Literal["dropped", "measured"] = Field(description="measured: answered every question, as the grid does")
    round: int = Field(description="the round it was dropped in or last answered in; 0: screening (never answered)")
    reason: str = ""
    answered: int = Field(description="questions answered: the answer figures and their intervals are over these")
    questions: int = Field(description="questions in the set: retrieval figures and context tokens are over all of them")


class RaceRound(_Model):
    round: int
    questions: int = Field(description="questions answered by the end of the round")
    racing: int = Field(description="trials that answered in the round")
    dropped: list[str] = Field(default_factory=list)
    generated: int = Field(description="generator calls made in the round")


class RaceSummary(_Model):
    """How the race ran (ragopt.eval.race): its knobs, its rounds, and what it cost against the full grid."""

    confidence: float = Field(description="how sure the race's drops of one trial are, all its tests together")
    tests: int = Field(1, description="tests a trial can meet: rounds tested (all but the last) x answer gates")
    per_test_confidence: float | None = Field(None, description="each test's confidence: 1 - (1 - confidence) / tests")
    schedule: list[float]
    min_questions: int
    seed: int
    round_sizes: list[int]
    screened_out: list[str] = Field(default_factory=list, description="trials dropped by screening, never answered")
    rounds: list[RaceRound] = Field(default_factory=list)
    sampled: bool = Field(False, description="the race ran over an Optuna sample of the grid, not the full grid")
    grid_answers: int = Field(description="answers the raced trials make unraced: trials (the full grid's, or the "
                                          "sampled ones) x questions")
    generations: Generations = Field(default_factory=Generations)


class Trial(_Model):
    id: str
    params: TrialParams
    metrics: dict[str, float | None] = Field(default_factory=dict)
    costs: Costs = Field(default_factory=Costs)
    per_query: dict[str, list[float | None]] = Field(
        default_factory=dict, description="metric -> one value per query, aligned with SweepResults.query_ids"
    )
    intervals: dict[str, Interval] = Field(
        default_factory=dict, description="judged metrics, and in a raced sweep the answer metrics: bootstrap interval "
                                          "of the mean over the queries measured")
    unsupported: dict[str, list[str]] = Field(
        default_factory=dict, description="query id -> the answer sentences the judge found unsupported by their passages")
    plan: dict[str, Any] | None = Field(None, description="the PlanConfig the trial ran, trained models as their folders: "
                                                          "`ragopt serve --from` rebuilds it")
    models: dict[str, ModelInfo] = Field(default_factory=dict, description="embedder, rerank, generator: by file fingerprint")
    race: RaceInfo | None = Field(None, description="in a raced sweep: whether the trial was dropped, when and why")

    @field_validator("metrics", mode="before")
    @classmethod
    def _metrics_nan(cls, v: Any) -> Any:
        return {k: _nan_to_none(x) for k, x in v.items()} if isinstance(v, dict) else v

    @field_validator("per_query", mode="before")
    @classmethod
    def _per_query_nan(cls, v: Any) -> Any:
        return {k: [_nan_to_none(x) for x in xs] for k, xs in v.items()} if isinstance(v, dict) else v

    @property
    def dropped(self) -> bool:
        """A race dropped it: its answer figures are over the questions it answered, not all."""
        return self.race is not None and self.race.status == "dropped"

    def values(self) -> dict[str, Any]:
        """Metrics and costs in one flat dict: what gates are evaluated against."""
        return {**self.metrics, **self.costs.model_dump()}


class GateVerdict(_Model):
    gate: str = Field(description="the expression as normalized, e.g. 'recall@10>=0.9'")
    metric: str
    op: Literal[">=", "<=", ">", "<"]
    threshold: float
    observed: float | None
    passed: bool
    margin: float | None = Field(description="how far inside the threshold (>0) or outside it (<0)")
    message: str
    within_noise: bool | None = Field(
        None, description="the metric's bootstrap interval over queries straddles the threshold (None: not checked)"
    )


class RegressionVerdict(_Model):
    trial_id: str
    metric: str
    n_queries: int
    baseline_mean: float
    current_mean: float
    diff: float = Field(description="current - baseline, mean over paired queries")
    ci_low: float
    ci_high: float
    confidence: float
    tolerance: float
    n_resamples: int
    seed: int
    regressed: bool
    message: str


class BaselineComparison(_Model):
    path: str
    tolerance: float
    verdicts: list[RegressionVerdict]
    regressed: bool


class HeldOut(_Model):
    """The selected configuration, chosen on one split, measured again on another."""

    split: str = Field(description='the report split, e.g. "test", or "holdout" for a seeded random share')
    selection_split: str
    trial: str
    n_queries: int
    confidence: float
    metrics: dict[str, float | None] = Field(description="the report split's metrics of the selected trial")
    intervals: dict[str, Interval] = Field(default_factory=dict, description="bootstrap intervals on the report split")
    selection_intervals: dict[str, Interval] = Field(default_factory=dict, description="the same on the selection split")
    overfit: dict[str, bool] = Field(
        default_factory=dict, description="metric -> the held-out mean falls outside the selection interval"
    )


class SweepResults(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    dataset: DatasetInfo
    created_at: str = Field(
        default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        description="ISO 8601, UTC",
    )
    versions: Versions
    models: dict[str, ModelInfo] = Field(default_factory=dict, description='e.g. {"embedder": {...}}')
    search_space: dict[str, Any] = Field(default_factory=dict)
    objective: str
    gates: list[str] = Field(default_factory=list)
    trials: list[Trial]
    selected: str | None = None
    verdicts: dict[str, list[GateVerdict]] = Field(default_factory=dict)
    query_ids: list[str] = Field(default_factory=list)
    baseline: BaselineComparison | None = None
    held_out: HeldOut | None = None
    generations: Generations | None = Field(None, description="what answering cost this run (None: nothing answered)")
    race: RaceSummary | None = Field(None, description="a raced sweep (ragopt sweep --race): its rounds and savings")

    @model_validator(mode="after")
    def _consistent(self) -> "SweepResults":
        ids = [t.id for t in self.trials]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate trial ids: {dupes}")
        known = set(ids)
        if self.selected is not None and self.selected not in known:
            raise ValueError(f"selected trial {self.selected!r} is not among the trials")
        stray = sorted(set(self.verdicts) - known)
        if stray:
            raise ValueError(f"verdicts for unknown trials: {stray}")
        n = len(self.query_ids)
        for t in self.trials:
            for name, values in t.per_query.items():
                if len(values) != n:
                    raise ValueError(
                        f"trial {t.id!r}: per_query[{name!r}] has {len(values)} values for {n} query_ids"
                    )
        return self

    def trial(self, trial_id: str) -> Trial:
        for t in self.trials:
            if t.id == trial_id:
                return t
        raise KeyError(trial_id)

    @property
    def selected_trial(self) -> Trial | None:
        return self.trial(self.selected) if self.selected is not None else None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "SweepResults":
        """Read a results.json; a missing, malformed or incompatible file is an InputError naming it."""
        return validate(cls, read_results(path), path)
