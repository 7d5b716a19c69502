"""Documents with addressable spans, and questions that point into them: `Builder` collects both; a step or
span added with a key is what a question's evidence names."""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from hospital.world import Asker, Step, Tenant


class Doc:
    """A document under construction. Text added with a key is remembered as a span that questions can cite;
    steps that carry a question add it to `asks` as (span key, question, answer)."""

    def __init__(self, doc_id: str, title: str, tenant: Tenant | None, scopes: tuple[str, ...], kind: str):
        self.id, self.title, self.tenant, self.kind = doc_id, title, tenant, kind
        self.scopes = tuple(sorted(scopes))
        self.parts: list[str] = []
        self.length = 0
        self.spans: dict[str, tuple[int, int]] = {}
        self.asks: list[tuple[str, str, str]] = []

    def add(self, text: str, key: str = "") -> None:
        if key:
            if key in self.spans:
                raise ValueError(f"{self.id}: span {key} marked twice")
            self.spans[key] = (self.length, self.length + len(text))
        self.parts.append(text)
        self.length += len(text)

    def line(self, text: str, key: str = "") -> None:
        self.add(text, key)
        self.add("\n")

    def para(self, text: str, key: str = "") -> None:
        self.add(text, key)
        self.add("\n\n")

    def heading(self, text: str) -> None:
        self.add(f"## {text}\n\n")

    @contextmanager
    def span(self, key: str) -> Iterator[None]:
        """Everything added inside the block, trailing whitespace excluded, becomes the span `key`."""
        start = self.length
        yield
        self.spans[key] = (start, start + len("".join(self.parts)[start:].rstrip()))

    def steps(self, steps: list[Step], params: dict[str, str], prefix: str, numbered: bool = False) -> None:
        """A list of step templates for this document's hospital; step n is the span `{prefix}-{n}`, and
        steps with a question become asks."""
        tenant = self.tenant.short if self.tenant else "shared"
        kept = [s for s in steps if not s.only or s.only == tenant]
        for n, s in enumerate(kept, start=1):
            key = f"{prefix}-{n}"
            self.add(f"{n}. " if numbered else "- ")
            self.line(s.text.format_map(params), key)
            if s.question:
                self.asks.append((key, s.question.format_map(params), s.answer.format_map(params)))
        self.add("\n")

    def cite(self, key: str) -> str:
        start, end = self.spans[key]
        return self.text[start:end]

    @property
    def text(self) -> str:
        return "".join(self.parts).rstrip()


def visible(doc: Doc, asker: Asker) -> bool:
    """ragopt's permission rule: same hospital (or shared), and a scope in common (or unscoped)."""
    tenant_ok = doc.tenant is None or doc.tenant is asker.tenant
    return tenant_ok and (not doc.scopes or bool(set(doc.scopes) & set(asker.scopes)))


@dataclass
class Question:
    id: str
    text: str
    answer: str
    evidence: list[tuple[Doc, str]]  # (document, span key)
    asker: Asker
    relevance: dict[Doc, int] | None = None  # graded, where more pages than the evidence pages state the answer
    history: list[tuple[str, str]] = field(default_factory=list)  # (role, content)

    def check(self) -> None:
        """The asker may see every evidence and relevant document, and the answer is quoted from one evidence span."""
        for doc in [d for d, _ in self.evidence] + list(self.relevance or ()):
            if not visible(doc, self.asker):
                raise ValueError(f"{self.id}: {doc.id} is not visible to its asker")
        if not any(self.answer in doc.cite(key) for doc, key in self.evidence):
            raise ValueError(f"{self.id}: the answer {self.answer!r} is not in its evidence")


class Builder:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.docs: dict[str, Doc] = {}
        self.questions: dict[str, Question] = {}

    def doc(self, doc_id: str, title: str, tenant: Tenant | None, scopes: tuple[str, ...], kind: str) -> Doc:
        if doc_id in self.docs:
            raise ValueError(f"document {doc_id} made twice")
        self.docs[doc_id] = Doc(doc_id, title, tenant, scopes, kind)
        return self.docs[doc_id]

    def ask(self, qid: str, text: str, answer: str, evidence: list[tuple[Doc, str]], asker: Asker, **extra) -> None:
        if qid in self.questions:
            raise ValueError(f"question {qid} asked twice")
        self.questions[qid] = Question(qid, text, answer, evidence, asker, **extra)

    def corpus_rows(self) -> Iterator[dict]:
        for d in self.docs.values():
            tenant = d.tenant.id if d.tenant else None
            yield {"id": d.id, "title": d.title, "text": d.text, "tenant": tenant, "scopes": list(d.scopes),
                   "metadata": {"kind": d.kind}}

    def question_rows(self) -> Iterator[dict]:
        for q in self.questions.values():
            q.check()
            row: dict = {"id": q.id, "question": q.text, "answer": q.answer}
            row["evidence"] = [{"doc_id": d.id, "start": d.spans[k][0], "end": d.spans[k][1]} for d, k in q.evidence]
            if q.relevance:
                row["relevance"] = {d.id: grade for d, grade in q.relevance.items()}
            row.update({"tenant": q.asker.tenant.id, "scopes": list(q.asker.scopes)})
            if q.history:
                row["history"] = [{"role": role, "content": content} for role, content in q.history]
            yield row


def system_of(t: Tenant, system: str) -> str:
    return t.lab if system == "lab" else t.emr


def dictionary_of(t: Tenant, system: str) -> str:
    return t.lab_dictionary if system == "lab" else t.emr_dictionary
