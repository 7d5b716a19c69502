"""Filters a generated question passes before it is kept, in this order (each counts what it drops):

- evidence_not_verbatim: the evidence span's text occurs verbatim in its document (an LLM's "quote" that is
  not in the document is dropped, never repaired);
- empty_question: nothing left to ask;
- near_duplicate: its word set is at least `duplicate_jaccard` similar to a kept question's;
- per_document_cap: its source (the file, or the document) already has `per_document_cap` questions;
- round_trip: the named retriever does not find its source document within top_k.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from ragopt.synth import SynthConfig
from ragopt.synth.extractive import Candidate
from ragopt.text import words
from ragopt.types import Document, Query

ORDER = ("evidence_not_verbatim", "empty_question", "near_duplicate", "per_document_cap", "round_trip")


def source_of(doc: Document) -> str:
    return str(doc.metadata.get("source") or doc.id)


class Filters:
    def __init__(self, config: SynthConfig, documents: dict[str, Document], round_trip: Any = None):
        self.config, self.documents, self.round_trip = config, documents, round_trip
        self.dropped: Counter[str] = Counter({name: 0 for name in ORDER})
        self._kept_words: list[set[str]] = []
        self._per_source: Counter[str] = Counter()

    def first_failure(self, c: Candidate) -> str | None:
        doc = self.documents[c.doc_id]
        if c.start < 0 or not c.evidence.strip() or doc.text[c.start:c.end] != c.evidence:
            return "evidence_not_verbatim"
        bag = set(words(c.question))
        if not bag:
            return "empty_question"
        if any(len(bag & kept) / len(bag | kept) >= self.config.duplicate_jaccard for kept in self._kept_words):
            return "near_duplicate"
        if self._per_source[source_of(doc)] >= self.config.per_document_cap:
            return "per_document_cap"
        if self.round_trip is not None and not self.round_trip(c.question, doc):
            return "round_trip"
        return None

    def admit(self, c: Candidate) -> bool:
        """True (and remembered) when `c` passes every filter; else its first failure is counted."""
        failure = self.first_failure(c)
        if failure is not None:
            self.dropped[failure] += 1
            return False
        self._kept_words.append(set(words(c.question)))
        self._per_source[source_of(self.documents[c.doc_id])] += 1
        return True


class Askers:
    """Who asks about a document: its own tenant and scopes; for a shared document in a corpus with tenants,
    one of the tenants, picked by the seed (a query must name its tenant there)."""

    def __init__(self, documents: Sequence[Document], seed: int):
        self.tenants = sorted({d.tenant for d in documents if d.tenant is not None})
        self.seed = seed

    def __call__(self, doc: Document) -> tuple[str | None, tuple[str, ...]]:
        if doc.tenant is not None or not self.tenants:
            return doc.tenant, doc.scopes
        import hashlib

        pick = int(hashlib.sha256(f"{self.seed}\x1f{doc.id}".encode()).hexdigest(), 16) % len(self.tenants)
        return self.tenants[pick], doc.scopes


def _retrieval(index: Any, embedder: Any, retriever: str, top_k: int) -> Any:
    from ragopt.config import RetrievalConfig
    from ragopt.pipeline import Pipeline
    from ragopt.plan import retrieval_stages

    return Pipeline(retrieval_stages(index, embedder, RetrievalConfig(retriever=retriever, top_k=top_k)))


def round_trip_check(index: Any, embedder: Any, config: SynthConfig, askers: Askers) -> Any:
    """A function (question, document) -> found within top_k by the configured retriever, as its asker."""
    rt = config.round_trip
    pipeline = _retrieval(index, embedder, rt.retriever, rt.top_k)

    def found(question: str, doc: Document) -> bool:
        tenant, scopes = askers(doc)
        result = pipeline.run(Query(text=question, tenant=tenant, scopes=scopes))
        return any(h.chunk.doc_id == doc.id for h in result.hits)

    return found


def searcher(index: Any, embedder: Any, askers: Askers, documents: dict[str, Document], retriever: str,
             top_k: int = 10) -> dict[str, Any]:
    """"search": a function query -> the ids of `retriever`'s top_k documents, asked as the first tenant with every
    scope (a user's example queries carry no owner); "embed": queries -> their vectors cached first."""
    tenant = askers.tenants[0] if askers.tenants else None
    scopes = tuple(sorted({s for d in documents.values() for s in d.scopes}))
    pipeline = _retrieval(index, embedder, retriever, top_k)

    def search(query: str) -> list[str]:
        return [h.chunk.doc_id for h in pipeline.run(Query(text=query, tenant=tenant, scopes=scopes)).hits]

    def embed(queries: Sequence[str]) -> None:  # in one batch, into the cache the dense pipeline reads
        embedder.encode(list(queries), [(tenant, scopes)] * len(queries))

    return {"search": search, "embed": embed}


def ordered(documents: Sequence[Document], seed: int) -> list[Document]:
    """Documents in an order fixed by the seed alone (not by input order or hash seeds)."""
    import hashlib

    return sorted(documents, key=lambda d: hashlib.sha256(f"{seed}\x1f{d.id}".encode()).hexdigest())
