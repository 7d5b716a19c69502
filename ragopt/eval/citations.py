"""Citation accuracy of a generated answer: do its [n] markers name passages it was given, and the right documents?

- `valid_share`: the share of citations that point to a provided passage (Citation.valid);
- `precision`: the share of cited documents (from valid citations, each document once) that are gold evidence;
- `recall`: the share of gold evidence documents that are cited.
A score that is undefined for an answer is None: `valid_share` and `precision` when nothing is cited,
`recall` when there is no gold evidence. `aggregate` averages each score over the answers where it is defined.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from ragopt.data import Evidence
from ragopt.types import Answer


class CitationScores(BaseModel):
    n_citations: int
    n_valid: int
    cited_docs: list[str]
    valid_share: float | None
    precision: float | None
    recall: float | None

    @property
    def f1(self) -> float | None:
        if self.precision is None or self.recall is None:
            return None
        total = self.precision + self.recall
        return 2 * self.precision * self.recall / total if total else 0.0


def _gold_ids(gold: Iterable[str | Evidence]) -> set[str]:
    return {g.doc_id if isinstance(g, Evidence) else str(g) for g in gold}


def citation_scores(answer: Answer, gold: Iterable[str | Evidence]) -> CitationScores:
    """Score one answer's citations against gold evidence (doc ids, or Evidence items: their doc ids count)."""
    gold_ids = _gold_ids(gold)
    cites = answer.citations
    valid = [c for c in cites if c.valid]
    cited: list[str] = []
    for c in valid:
        if c.doc_id is not None and c.doc_id not in cited:
            cited.append(c.doc_id)
    correct = sum(1 for d in cited if d in gold_ids)
    return CitationScores(
        n_citations=len(cites),
        n_valid=len(valid),
        cited_docs=cited,
        valid_share=len(valid) / len(cites) if cites else None,
        precision=correct / len(cited) if cited else None,
        recall=correct / len(gold_ids) if gold_ids else None,
    )


def aggregate(scores: Sequence[CitationScores]) -> dict[str, float | None]:
    """Means over answers, each score over the answers where it is defined; plus the share of answers that cite."""

    def avg(values: list[float | None]) -> float | None:
        defined = [v for v in values if v is not None]
        return sum(defined) / len(defined) if defined else None

    return {
        "citation_valid_share": avg([s.valid_share for s in scores]),
        "citation_precision": avg([s.precision for s in scores]),
        "citation_recall": avg([s.recall for s in scores]),
        "answers_with_citations": (sum(1 for s in scores if s.n_citations) / len(scores)) if scores else None,
    }
