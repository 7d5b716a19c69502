"""LangChain interop: ragopt retrieval as a `BaseRetriever`, a ragopt pipeline as a `Runnable`.

    retriever = RagoptRetriever(pipeline=retrieval_stages(index, embedder, RetrievalConfig()), tenant="north")
    docs = retriever.invoke("what unit is creatinine in?")        # list[langchain_core.documents.Document]

    chain = as_runnable(pipeline)
    chain.invoke("what unit is creatinine in?")                   # answer text, or the hits as Documents
    chain.batch([{"text": "q1", "tenant": "north"}, "q2"])

Each hit becomes a Document whose `page_content` is the chunk text and whose metadata holds `doc_id`,
`chunk_id`, `start`, `end` (char offsets into the source document), `score`, `rank`, `retriever`, `tenant`,
`scopes`, `title` and the source document's own metadata (ragopt's keys win a name clash). Documents coming
the other way go through `ragopt.types.Document.from_langchain`.

Tenant and scopes are never inferred: the retriever takes them as fields, the runnable from each input.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document as LCDocument
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from ragopt.errors import InputError
from ragopt.pipeline import Pipeline, Result, Stage, Step
from ragopt.types import Hit, Query

PipelineInput = Union[str, Query, dict[str, Any]]
PipelineOutput = Union[str, list[LCDocument]]


def hit_to_document(hit: Hit) -> LCDocument:
    """One ragopt hit as a LangChain Document (id = chunk id)."""
    c = hit.chunk
    metadata = {
        **c.metadata,
        "doc_id": c.doc_id,
        "chunk_id": c.id,
        "start": c.start,
        "end": c.end,
        "score": hit.score,
        "rank": hit.rank,
        "retriever": hit.retriever,
        "tenant": c.tenant,
        "scopes": list(c.scopes),
        "title": c.title,
    }
    return LCDocument(page_content=c.text, metadata=metadata, id=c.id)


def _as_pipeline(value: Any) -> Pipeline:
    if isinstance(value, Pipeline):
        return value
    if isinstance(value, (list, tuple)):
        return Pipeline(list(value))
    if isinstance(value, (Stage, Step)):
        return Pipeline([value])
    raise TypeError(f"expected a ragopt Pipeline or a list of stages, got {type(value).__name__}")


def to_query(value: PipelineInput) -> Query:
    """A str (no tenant), a ragopt Query, or a dict with `text` and optional `tenant`, `scopes`, `history`, `id`."""
    if isinstance(value, Query):
        return value
    if isinstance(value, str):
        return Query(text=value)
    if isinstance(value, dict):
        unknown = set(value) - set(Query.model_fields)
        if unknown:
            raise InputError(f"unknown input key(s) {sorted(unknown)}; expected {sorted(Query.model_fields)}", field=sorted(unknown)[0])
        try:
            return Query.model_validate(value)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(err["msg"], field=".".join(str(p) for p in err["loc"]) or None) from None
    raise InputError(f"expected a str, a ragopt Query or a dict, got {type(value).__name__}", field="input")


def pipeline_depth(pipeline: Pipeline) -> int | None:
    """How many hits the pipeline hands on at most: the `k` of its last stage that has one (None: unknown)."""
    for step in reversed(pipeline.steps):
        k = getattr(step.stage, "k", None)
        if isinstance(k, int) and not isinstance(k, bool):
            return k
    return None


def check_k(k: int, pipeline: Pipeline) -> int:
    """`k` as a number of documents to return: at least 1, and no deeper than the pipeline retrieves (a k past
    its depth would silently return fewer); InputError (a ValueError) naming k otherwise."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a whole number of at least 1, got {k!r}", field="k")
    depth = pipeline_depth(pipeline)
    if depth is not None and k > depth:
        raise InputError(f"k={k} is deeper than the pipeline retrieves ({depth} hits): build its stages with k >= {k}",
                         field="k")
    return k


class RagoptRetriever(BaseRetriever):
    """A ragopt retrieval pipeline as a LangChain retriever; every call runs as `tenant` with `scopes`.

    `pipeline` is a ragopt `Pipeline` or a list of stages (e.g. `ragopt.plan.retrieval_stages(...)`).
    A pipeline over tenant data refuses a retriever without a tenant (ragopt.errors.TenantRequired).
    `k` (on the retriever, or per call: `retriever.invoke(query, k=3)`) returns at most k documents; a k below 1
    or deeper than the pipeline's last stage retrieves is an error naming k (`check_k`). LangChain's standard
    retriever suite (`langchain-tests`) runs against it in tests/interop/test_langchain_standard.py.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pipeline: Any
    tenant: str | None = None
    scopes: tuple[str, ...] = ()
    deadline_s: float | None = None
    k: int | None = Field(None, description="return at most k documents (None: whatever the pipeline returns)")

    @field_validator("pipeline", mode="before")
    @classmethod
    def _pipeline(cls, value: Any) -> Pipeline:
        return _as_pipeline(value)

    @field_validator("scopes", mode="before")
    @classmethod
    def _scopes(cls, value: Any) -> tuple[str, ...]:
        return Query(text="", scopes=value).scopes

    @model_validator(mode="after")
    def _k_fits(self) -> "RagoptRetriever":
        if self.k is not None:
            check_k(self.k, self.pipeline)
        return self

    def run(self, text: str) -> Result:
        """The full ragopt result (hits and trace) for one query, as this retriever's tenant."""
        return self.pipeline.run(Query(text=text, tenant=self.tenant, scopes=self.scopes), deadline_s=self.deadline_s)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[LCDocument]:
        """The hits as Documents; `k` (LangChain passes `invoke(query, k=...)` here) overrides the retriever's."""
        if k is not None:
            check_k(k, self.pipeline)
        hits = self.run(query).hits
        return [hit_to_document(h) for h in hits[: k if k is not None else self.k]]


class PipelineRunnable(Runnable[PipelineInput, PipelineOutput]):
    """A ragopt pipeline as a LangChain Runnable.

    Input: a str, a ragopt `Query`, or a dict with `text` and optional `tenant`, `scopes`, `history`, `id`.
    Output: the answer text when the pipeline produced an answer (a generation stage ran), otherwise the
    final hits as LangChain Documents (see `hit_to_document`). `batch` runs inputs through LangChain's
    executor, `max_concurrency` included; the stages are shared, so pass `{"max_concurrency": 1}` to keep a
    CPU-bound pipeline from competing with itself.
    """

    def __init__(self, pipeline: Pipeline | Sequence[Stage | Step], deadline_s: float | None = None, name: str = "ragopt"):
        self.pipeline = _as_pipeline(pipeline)
        self.deadline_s = deadline_s
        self.name = name

    @property
    def InputType(self) -> Any:  # noqa: N802 - LangChain's name
        return PipelineInput

    @property
    def OutputType(self) -> Any:  # noqa: N802 - LangChain's name
        return PipelineOutput

    def run(self, value: PipelineInput) -> Result:
        """The full ragopt result (hits, answer and trace) for one input."""
        return self.pipeline.run(to_query(value), deadline_s=self.deadline_s)

    def _output(self, value: PipelineInput) -> PipelineOutput:
        result = self.run(value)
        if result.answer is not None:
            return result.answer.text
        return [hit_to_document(h) for h in result.hits]

    def invoke(self, input: PipelineInput, config: RunnableConfig | None = None, **kwargs: Any) -> PipelineOutput:  # noqa: A002
        return self._call_with_config(self._output, input, config, run_type="chain")


def as_runnable(pipeline: Pipeline | Sequence[Stage | Step], *, deadline_s: float | None = None) -> PipelineRunnable:
    """Expose a ragopt pipeline (or a list of stages) as a LangChain Runnable: see `PipelineRunnable`."""
    return PipelineRunnable(pipeline, deadline_s=deadline_s)
