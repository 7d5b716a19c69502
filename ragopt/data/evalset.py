"""An evaluation set: documents, queries with graded relevance and evidence spans, reference answers."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ragopt.types import Document, Query


class Evidence(BaseModel):
    """Gold evidence: a whole document (start/end None) or a char span `text[start:end]` of its text."""

    doc_id: str
    start: int | None = None
    end: int | None = None

    def overlaps(self, doc_id: str, start: int, end: int) -> bool:
        """A chunk [start, end) of `doc_id` shares at least one character with this evidence (citations:
        a cited chunk is right when it touches the gold span; span recall asks for more coverage)."""
        if doc_id != self.doc_id:
            return False
        if self.start is None or self.end is None:
            return True
        return start < self.end and self.start < end


class EvalQuery(BaseModel):
    query: Query
    relevance: dict[str, int] = Field(default_factory=dict)  # doc_id -> graded relevance (> 0 is relevant)
    evidence: list[Evidence] = Field(default_factory=list)  # span-level gold, where the dataset has it
    reference_answer: str | None = None  # for a question that needs live data too: the documents' part
    live_reference: str | None = None  # the part live data answers (a tool: ragopt.stages.tool)


class EvalSet(BaseModel):
    name: str
    source: str  # the path it was loaded from
    documents: list[Document]
    queries: list[EvalQuery]

    def doc_map(self) -> dict[str, Document]:
        return {d.id: d for d in self.documents}
