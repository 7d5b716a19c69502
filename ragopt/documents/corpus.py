"""A corpus.jsonl among the documents: ragopt format (`"id"` keys) or BEIR (`"_id"`), told apart by its first
line. Its documents keep their ids, so results on them compare with a labelled set's, trial by trial."""

from __future__ import annotations

from pathlib import Path

from ragopt.documents.loaded import Problem
from ragopt.errors import BadFile
from ragopt.types import Document


def load(path: Path, rel: str) -> tuple[list[Document], list[Problem]]:
    from ragopt.data import beir, jsonl

    first = next(jsonl.read_lines(path), None)
    if first is None:
        raise BadFile("empty file (no documents)")
    _, obj = first
    return (beir.load_corpus(path) if "_id" in obj else jsonl.load_corpus(path)), []
