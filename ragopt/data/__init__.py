"""Evaluation data: documents, queries with graded relevance and evidence spans, and their loaders."""

from __future__ import annotations

from pathlib import Path

from ragopt.data.evalset import EvalQuery, EvalSet, Evidence

__all__ = ["EvalQuery", "EvalSet", "Evidence", "SYNTH_RECORD", "generated_note", "load_evalset"]

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
    from ragopt.data.trust import trust_line

    return (f"questions made by the {record.get('generator')} generator ({record.get('model_fingerprint')}, "
            f"prompt {record.get('prompt_version')}, seed {record.get('seed')}, {trip}) from {record.get('source')}, "
            f"not asked by people; {trust_line(bool(record.get('like')))}")


def load_evalset(path: str | Path, split: str = "test") -> EvalSet:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/) or a ragopt eval folder/file (see data/jsonl.py)."""
    path = Path(path)
    if path.is_dir() and (path / "corpus.jsonl").exists() and (path / "qrels").is_dir():
        from ragopt.data.beir import load_beir

        return load_beir(path, split=split)
    from ragopt.data.jsonl import load_ragopt_jsonl

    return load_ragopt_jsonl(path)
