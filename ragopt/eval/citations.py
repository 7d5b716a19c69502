"""Citation accuracy of a generated answer: do its [n] markers name passages it was given, and the right documents?

- `valid_share`: the share of citations that point to a provided passage (Citation.valid);
- `precision`: the share of cited documents (from valid citations, each document once) that are gold evidence;
- `recall`: the share of gold evidence documents that are cited.
A score that is undefined for an answer is None: `valid_share` and `precision` when nothing is cited,
`recall` when there is no gold evidence. `aggregate` averages each score over the answers where it is defined.

Span level, when the cited chunks are given: a cited chunk is correct when it overlaps a gold evidence span
(same document, overlapping [start, end) char offsets; gold without offsets counts as the whole document).
- `span_precision`: the share of cited chunks (each once) that overlap gold evidence;
- `span_recall`: the share of gold evidence items that a cited chunk overlaps.
Document level barely separates a model from always citing [1] on a set whose top passage is usually right;
`first_passage_floor` gives that floor, to print beside a generator's figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel

from ragopt.data import Evidence
from ragopt.types import Answer, Chunk, Citation


class CitationScores(BaseModel):
    n_citations: int
    n_valid: int
    cited_docs: list[str]
    valid_share: float | None
    precision: float | None
    recall: float | None
    span_precision: float | None = None  # None when the cited chunks were not given
    span_recall: float | None = None

    @property
    def f1(self) -> float | None:
        if self.precision is None or self.recall is None:
            return None
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0


def _evidence(gold: Iterable[str | Evidence]) -> list[Evidence]:
    return [g if isinstance(g, Evidence) else Evidence(doc_id=str(g)) for g in gold]


def score_answer_citations(
    answer: Answer, gold: Iterable[str | Evidence], chunks: Mapping[str, Chunk] | Iterable[Chunk] | None = None
) -> CitationScores:
    """Score one answer's citations against gold evidence (doc ids, or Evidence items); with `chunks` (the
    passages it could cite, by id or as a list), at the span level too."""
    evidence = _evidence(gold)
    gold_ids = {e.doc_id for e in evidence}
    cites = answer.citations
    valid = [c for c in cites if c.valid]
    cited: list[str] = []
    for c in valid:
        if c.doc_id is not None and c.doc_id not in cited:
            cited.append(c.doc_id)
    correct = sum(1 for d in cited if d in gold_ids)
    span_precision = span_recall = None
    if chunks is not None:
        by_id = chunks if isinstance(chunks, Mapping) else {c.id: c for c in chunks}
        cited_chunks = [by_id[i] for i in dict.fromkeys(c.chunk_id for c in valid) if i in by_id]
        hit = [any(e.overlaps(c.doc_id, c.start, c.end) for e in evidence) for c in cited_chunks]
        covered = [any(e.overlaps(c.doc_id, c.start, c.end) for c in cited_chunks) for e in evidence]
        span_precision = sum(hit) / len(hit) if hit else None
        span_recall = sum(covered) / len(covered) if covered else None
    return CitationScores(
        n_citations=len(cites),
        n_valid=len(valid),
        cited_docs=cited,
        valid_share=len(valid) / len(cites) if cites else None,
        precision=correct / len(cited) if cited else None,
        recall=correct / len(gold_ids) if gold_ids else None,
        span_precision=span_precision,
        span_recall=span_recall,
    )


def first_passage_floor(first: Chunk | None, gold: Iterable[str | Evidence]) -> CitationScores:
    """What an answer would score by citing [1], the top passage, after every sentence (None: no passage)."""
    cites = [] if first is None else [Citation(marker=1, chunk_id=first.id, doc_id=first.doc_id)]
    return score_answer_citations(Answer(text="", citations=cites), gold, [] if first is None else [first])


def aggregate(scores: Sequence[CitationScores]) -> dict[str, float | None]:
    """Means over answers, each score over the answers where it is defined; plus the share of answers that cite."""

    def avg(values: list[float | None]) -> float | None:
        defined = [v for v in values if v is not None]
        return sum(defined) / len(defined) if defined else None

    return {
        "citation_valid_share": avg([s.valid_share for s in scores]),
        "citation_precision": avg([s.precision for s in scores]),
        "citation_recall": avg([s.recall for s in scores]),
        "citation_span_precision": avg([s.span_precision for s in scores]),
        "citation_span_recall": avg([s.span_recall for s in scores]),
        "answers_with_citations": (sum(1 for s in scores if s.n_citations) / len(scores)) if scores else None,
    }
