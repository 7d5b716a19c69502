"""Evaluation data: documents, queries with graded relevance and evidence spans, and their loaders."""

from __future__ import annotations

from pathlib import Path

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
    reference_answer: str | None = None


SYNTH_RECORD = "synth.json"  # beside a generated set's questions: how they were generated (ragopt/synth)


def generated_note(source: str | Path) -> str | None:
    """For a set that ragopt synth generated, one line saying so and how; None for any other set."""
    import json

    folder = Path(source) if Path(source).is_dir() else Path(source).parent
    try:
        record = json.loads((folder / SYNTH_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rt = record.get("filters", {}).get("round_trip", {})
    trip = f"round trip {rt.get('retriever')}@{rt.get('top_k')}" if rt.get("enabled") else "no round trip"
    return (f"questions made by the {record.get('generator')} generator ({record.get('model_fingerprint')}, "
            f"prompt {record.get('prompt_version')}, seed {record.get('seed')}, {trip}) from {record.get('source')}, "
            "not asked by people")


class EvalSet(BaseModel):
    name: str
    source: str  # the path it was loaded from
    documents: list[Document]
    queries: list[EvalQuery]

    def doc_map(self) -> dict[str, Document]:
        return {d.id: d for d in self.documents}


def load_evalset(path: str | Path, split: str = "test") -> EvalSet:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/) or a ragopt eval folder/file (see data/jsonl.py)."""
    path = Path(path)
    if path.is_dir() and (path / "corpus.jsonl").exists() and (path / "qrels").is_dir():
        from ragopt.data.beir import load_beir

        return load_beir(path, split=split)
    from ragopt.data.jsonl import load_ragopt_jsonl

    return load_ragopt_jsonl(path)
