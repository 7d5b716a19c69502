"""`ragopt synth` in real subprocesses on the shipped hospital corpus (a ragopt corpus.jsonl: its ids are kept):
byte-identical questions for a seed in fresh processes and workspaces, the same result after a kill, a set
`ragopt sweep --dataset` takes, and a record of what each filter dropped."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from fixtures.cli import one_line_error, ragopt
from fixtures.documents import write_knowledge_base
from fixtures.synth import hospital_slice, synth_killed_at

EVERY = 4  # every 4th document of the shipped corpus (both tenants, shared ones, scopes): a quick test
ARGS = ("synth", "--questions", "20", "--seed", "7")

@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hospital_slice(tmp_path_factory.mktemp("corpus"), EVERY)


@pytest.fixture(scope="module")
def first(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synth")
    done = ragopt(*ARGS, "--docs", str(corpus), "--out", str(root / "set"), workspace=root / "ws")
    assert done.returncode == 0, done.stderr
    return root / "set"


def test_the_set_keeps_corpus_ids_and_records_every_filter(first: Path, corpus: Path) -> None:
    record = json.loads((first / "synth.json").read_text(encoding="utf-8"))
    assert record["generator"] == "extractive" and record["seed"] == 7 and record["counts"]["kept"] == 20
    assert set(record["counts"]["dropped"]) == {"evidence_not_verbatim", "empty_question", "near_duplicate",
                                                 "per_document_cap", "round_trip"}
    assert record["filters"]["round_trip"] == {"enabled": True, "retriever": "hybrid", "top_k": 20, "chunker": "whole"}
    docs = {json.loads(line)["id"]: json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()}
    questions = [json.loads(line) for line in (first / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    copied = 0
    for q in questions:
        (ev,) = q["evidence"]
        doc = docs[ev["doc_id"]]  # the corpus's own ids
        assert doc["text"][ev["start"]:ev["end"]] == q["answer"]  # evidence verbatim, and the reference answer
        assert q.get("scopes", []) == doc.get("scopes", [])  # a shared document's asker is one of the tenants
        assert q["tenant"] == doc["tenant"] if doc.get("tenant") else q["tenant"] in {"north-hospital", "south-hospital"}
        words = q["question"].lower().split()
        copied += sum(w in q["answer"].lower() for w in words) / len(words)
    assert copied / len(questions) < 0.8  # questions say part of it in other words, not a copy of the sentence


def test_same_seed_same_bytes_in_a_fresh_process_and_workspace(first: Path, corpus: Path, tmp_path: Path) -> None:
    done = ragopt(*ARGS, "--docs", str(corpus), "--out", str(tmp_path / "set"), workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "set" / "questions.jsonl").read_bytes() == (first / "questions.jsonl").read_bytes()
    other = ragopt(*ARGS[:-1], "8", "--docs", str(corpus), "--out", str(tmp_path / "other"), workspace=tmp_path / "ws")
    assert (tmp_path / "other" / "questions.jsonl").read_bytes() != (first / "questions.jsonl").read_bytes(), other.stderr


def test_killed_halfway_then_run_again_gives_the_same_set(first: Path, corpus: Path, tmp_path: Path) -> None:
    ws, out = tmp_path / "ws", tmp_path / "set"
    args = (*ARGS, "--docs", str(corpus), "--out", str(out))
    killed = synth_killed_at("ragopt.synth.extractive.ExtractiveQuestionGenerator", 15, args, ws)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not out.exists()  # nothing written half-way
    done = ragopt(*args, workspace=ws)
    assert done.returncode == 0, done.stderr
    assert (out / "questions.jsonl").read_bytes() == (first / "questions.jsonl").read_bytes()
    assert not list(tmp_path.glob(".set.tmp*"))  # the killed run's scratch is gone


def test_synth_then_sweep_on_a_folder_of_documents(tmp_path: Path) -> None:
    kb = write_knowledge_base(tmp_path / "kb")
    ws = tmp_path / "ws"
    done = ragopt("synth", "--docs", str(kb), "--out", str(tmp_path / "set"), "--questions", "5", workspace=ws)
    assert done.returncode == 0, done.stderr
    assert "generated 5 questions from 7 documents with the extractive generator" in done.stderr
    swept = ragopt("sweep", "--dataset", str(tmp_path / "set"), "--retrievers", "bm25", "--top-k", "3",
                   "--out", str(tmp_path / "runs"), "--no-progress", workspace=ws)
    assert swept.returncode == 0, swept.stderr
    assert "figures from a generated set: questions made by the extractive generator" in swept.stdout
    assert "Figures from a generated set" in (tmp_path / "runs" / "summary.md").read_text(encoding="utf-8")
    from_docs = ragopt("sweep", "--docs", str(kb), "--retrievers", "bm25", "--top-k", "3", "--out", str(tmp_path / "runs2"),
                       "--no-progress", workspace=ws)
    assert from_docs.returncode == 0, from_docs.stderr
    assert "generated an evaluation set from --docs" in from_docs.stderr
    assert "figures from a generated set" in from_docs.stdout


def test_bad_flags_and_an_out_that_is_not_a_generated_set(tmp_path: Path) -> None:
    kb = write_knowledge_base(tmp_path / "kb")
    ws = tmp_path / "ws"
    line = one_line_error(ragopt("synth", "--docs", str(kb), "--out", str(kb), workspace=ws), "synth")
    assert "[--out]: exists and is not a generated set" in line
    line = one_line_error(ragopt("synth", "--docs", str(kb), "--out", str(tmp_path / "s"), "--questions", "0", workspace=ws), "synth")
    assert "[--questions]" in line
    line = one_line_error(ragopt("synth", "--docs", str(kb), "--out", str(tmp_path / "s"), "--round-trip-k", "0",
                                 workspace=ws), "synth")
    assert "[--round-trip-k]" in line
    assert not ws.exists() or not (ws / "indexes").exists()
