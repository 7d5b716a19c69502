"""Evaluation data: documents, queries with graded relevance and evidence spans, and their loaders."""

from __future__ import annotations

from pathlib import Path

from ragopt.data.evalset import EvalQuery, EvalSet, Evidence

__all__ = ["EvalQuery", "EvalSet", "Evidence", "load_evalset"]


def load_evalset(path: str | Path, split: str = "test") -> EvalSet:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/) or a ragopt eval folder/file (see data/jsonl.py)."""
    path = Path(path)
    if path.is_dir() and (path / "corpus.jsonl").exists() and (path / "qrels").is_dir():
        from ragopt.data.beir import load_beir

        return load_beir(path, split=split)
    from ragopt.data.jsonl import load_ragopt_jsonl

    return load_ragopt_jsonl(path)
