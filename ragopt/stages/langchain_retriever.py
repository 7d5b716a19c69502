"""A user's own LangChain retriever as a ragopt retrieval stage, so `ragopt eval` and `ragopt sweep` measure
the chain a LangChain user already has:

    ragopt eval --dataset DIR --retriever langchain --langchain mypkg.retrievers:make_retriever

The target is "module:attribute": a `BaseRetriever`, any `Runnable` that maps a question to Documents, or a
callable taking no arguments that returns one. Each Document's id comes from `Document.id` or
metadata[id_key] (it must name the evaluation set's document ids to be scored).

Permissions still hold: Documents carry `tenant` and `scopes` in metadata (as ragopt's own hits do); one the
query may not see is dropped, and the trace counts the drops. A retriever that returns other tenants' data
is visible in `dropped_by_permissions`, never passed on.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ragopt.config import StrictModel, resolve_target
from ragopt.errors import InputError
from ragopt.pipeline import RequestState
from ragopt.types import Chunk, Document, Hit, visible_to


class LangChainRetrieverConfig(StrictModel):
    target: str = Field(description='"module:attribute": a retriever, a Runnable returning Documents, or a factory')
    k: int | None = Field(None, gt=0, description="keep at most k documents")
    id_key: str = Field("id", description="metadata key of a Document's id when Document.id is empty")


def load_target(target: str) -> Any:
    """The retriever "module:attribute" names, calling it when it is a plain factory."""
    obj = resolve_target(target, field="--langchain")
    if not hasattr(obj, "invoke") and callable(obj):
        obj = obj()
    if not hasattr(obj, "invoke"):
        raise InputError(f"{target!r} is not a LangChain retriever or Runnable (no invoke)", field="--langchain")
    return obj


class LangChainRetrieve:
    """Pipeline stage: the user's retriever on the query text; its Documents become hits."""

    reads = ("query",)
    span_kind = "RETRIEVER"  # OpenInference's word for it (ragopt.trace.Span.kind)

    def __init__(self, config: LangChainRetrieverConfig, retriever: Any = None, name: str = "langchain"):
        self.config = config
        self.retriever = retriever if retriever is not None else load_target(config.target)
        self.name = name
        self.writes = (f"candidates.{name}", "hits")

    def run(self, state: RequestState) -> RequestState:
        docs = self.retriever.invoke(state.query.text)
        hits: list[Hit] = []
        dropped = 0
        for lc_doc in docs:
            doc = Document.from_langchain(lc_doc, id_key=self.config.id_key)
            if not visible_to(doc.tenant, doc.scopes, state.query):
                dropped += 1
                continue
            meta = doc.metadata
            start, end = int(meta.get("start", 0)), int(meta.get("end", len(doc.text)))
            doc_id = str(meta.get("doc_id", doc.id))
            chunk = Chunk(id=str(meta.get("chunk_id", doc.id)), doc_id=doc_id, start=start, end=end, text=doc.text,
                          title=doc.title, tenant=doc.tenant, scopes=doc.scopes, metadata=meta)
            score = float(meta.get("score", 1.0 / (len(hits) + 1)))  # a retriever without scores ranks by position
            hits.append(Hit(chunk=chunk, score=score, rank=len(hits) + 1, retriever=self.name))
            if self.config.k is not None and len(hits) >= self.config.k:
                break
        state.usage.attrs["dropped_by_permissions"] = dropped
        state.candidates[self.name] = state.hits = hits
        return state
