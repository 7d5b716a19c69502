"""ragopt's own JSONL evaluation format: a round trip, the accepted layouts, and one test per kind of bad line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragopt.data import load_evalset
from ragopt.data.jsonl import dump_ragopt_jsonl, load_ragopt_jsonl
from ragopt.errors import InputError

DOCS = [
    {"id": "d1", "title": "Creatinine", "text": "Unit: µmol/L. Valid range 10 to 2000.", "tenant": "north"},
    {"id": "d2", "text": "Shared glossary: eGFR is an estimate.", "scopes": ["clinical", "ops"]},
    {"id": "d3", "text": "Finance only.", "tenant": "north", "scopes": ["finance"], "metadata": {"kind": "policy"}},
]
QUESTIONS = [
    {"id": "q1", "question": "What unit is creatinine in?", "answer": "µmol/L", "evidence": [{"doc_id": "d1", "start": 6, "end": 12}],
     "tenant": "north", "scopes": ["clinical"]},
    {"id": "q2", "question": "And eGFR?", "evidence": [{"doc_id": "d2"}], "relevance": {"d2": 2, "d1": 1},
     "tenant": "north", "scopes": ["ops"], "history": [{"role": "user", "content": "Creatinine unit?"},
                                                       {"role": "assistant", "content": "µmol/L [1]"}]},
]  # fmt: skip


def write(folder: Path, docs: list[Any] = DOCS, questions: list[Any] = QUESTIONS, newline: str = "\n") -> Path:
    """Each item is a dict (written as JSON) or a str (written as is, to make a bad line)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", docs), ("questions.jsonl", questions)):
        lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
        (folder / name).write_bytes("".join(line + newline for line in lines).encode("utf-8"))
    return folder


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    first = load_ragopt_jsonl(write(tmp_path / "a"))
    assert first.name == "a" and len(first.documents) == 3 and len(first.queries) == 2
    d1, d2, d3 = first.documents
    assert (d1.tenant, d1.scopes, d1.title) == ("north", (), "Creatinine")
    assert (d2.tenant, d2.scopes) == (None, ("clinical", "ops"))
    assert d3.metadata == {"kind": "policy"}
    q1, q2 = first.queries
    assert q1.query.text == "What unit is creatinine in?" and q1.query.tenant == "north"
    assert q1.query.scopes == ("clinical",) and q1.reference_answer == "µmol/L"
    assert d1.text[q1.evidence[0].start : q1.evidence[0].end] == "µmol/L"  # offsets count characters, not bytes
    assert q1.relevance == {"d1": 1}  # defaults to grade 1 per evidence document
    assert q2.relevance == {"d2": 2, "d1": 1} and q2.evidence[0].start is None
    assert [t.role for t in q2.query.history] == ["user", "assistant"] and q2.reference_answer is None

    dump_ragopt_jsonl(first, tmp_path / "b")
    second = load_ragopt_jsonl(tmp_path / "b")
    assert second.documents == first.documents and second.queries == first.queries
    dump_ragopt_jsonl(second, tmp_path / "c")
    for name in ("corpus.jsonl", "questions.jsonl"):
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "c" / name).read_bytes()


def test_a_questions_file_uses_the_corpus_beside_it(tmp_path: Path) -> None:
    folder = write(tmp_path / "set")
    (folder / "hard.jsonl").write_text(json.dumps(QUESTIONS[0]) + "\n", encoding="utf-8")
    loaded = load_ragopt_jsonl(folder / "hard.jsonl")
    assert loaded.name == "hard" and [q.query.id for q in loaded.queries] == ["q1"] and len(loaded.documents) == 3
    assert load_ragopt_jsonl(folder / "questions.jsonl").name == "set"
    assert len(load_evalset(folder).queries) == 2  # the generic entry point finds this format too


def test_crlf_bom_and_blank_lines_are_tolerated(tmp_path: Path) -> None:
    folder = write(tmp_path / "crlf", docs=[*DOCS, ""], newline="\r\n")
    (folder / "corpus.jsonl").write_bytes(b"\xef\xbb\xbf" + (folder / "corpus.jsonl").read_bytes())
    loaded = load_ragopt_jsonl(folder)
    assert len(loaded.documents) == 3 and loaded.documents[0].text.endswith("2000.")


def error(tmp_path: Path, **files: Any) -> InputError:
    with pytest.raises(InputError) as info:
        load_ragopt_jsonl(write(tmp_path / "bad", **files))
    return info.value


BAD_DOCS = [  # (case, corpus lines, line, field, words in the message)
    ("malformed_json", [DOCS[0], '{"id": "d2", "text": '], 2, None, "malformed JSON"),
    ("not_an_object", [DOCS[0], '["d2", "text"]'], 2, None, "JSON object"),
    ("missing_text", [DOCS[0], {"id": "d2"}, DOCS[2]], 2, "text", "missing required field"),
    ("id_not_a_string", [{"id": 7, "text": "seven"}], 1, "id", "valid string"),
    ("scopes_not_a_list", [{"id": "d1", "text": "x", "scopes": "clinical"}], 1, "scopes", "valid list"),
    ("unknown_key", [{"id": "d1", "text": "x", "scope": ["clinical"]}], 1, "scope", "unknown field"),
    ("key_twice", ['{"id": "d1", "text": "x", "text": "y"}'], 1, "text", "twice"),
    ("reserved_tenant", [{"id": "d1", "text": "x", "tenant": "*"}], 1, "tenant", "tenant must be"),
    ("duplicate_id", [DOCS[0], DOCS[1], {"id": "d1", "text": "again"}], 3, "id", "duplicate document id 'd1' (first on line 1)"),
]  # fmt: skip


@pytest.mark.parametrize("case,docs,line,field,words", BAD_DOCS, ids=[c[0] for c in BAD_DOCS])
def test_bad_corpus_line(
    tmp_path: Path, case: str, docs: list[Any], line: int, field: str | None, words: str
) -> None:
    err = error(tmp_path, docs=docs)
    assert (Path(err.path).name, err.line, err.field) == ("corpus.jsonl", line, field)
    assert words in err.message


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    folder = write(tmp_path / "bad")
    (folder / "corpus.jsonl").write_bytes(b'{"id": "d1", "text": "ok"}\n{"id": "d2", "text": "caf\xe9"}\n')
    with pytest.raises(InputError) as info:
        load_ragopt_jsonl(folder)
    assert (info.value.line, "UTF-8" in info.value.message) == (2, True)


def test_empty_corpus(tmp_path: Path) -> None:
    err = error(tmp_path, docs=["", "  "])
    assert Path(err.path).name == "corpus.jsonl" and "empty corpus" in err.message


def q(**changes: Any) -> dict[str, Any]:
    """A valid question with some keys changed (a value of None removes the key)."""
    row = {"id": "qx", "question": "Unit?", "evidence": [{"doc_id": "d1", "start": 0, "end": 5}], "tenant": "north"}
    row.update(changes)
    return {k: v for k, v in row.items() if v is not None}


BAD_QUESTIONS = [  # (case, question lines, line, field, words in the message)
    ("malformed_json", [q(), "{'id': 'q2'}"], 2, None, "malformed JSON"),
    ("missing_question", [q(question=None)], 1, "question", "missing required field"),
    ("blank_question", [q(question="  ")], 1, "question", "blank"),
    ("missing_evidence", [q(evidence=None)], 1, "evidence", "missing required field"),
    ("no_evidence", [q(evidence=[])], 1, "evidence", "at least 1"),
    ("start_not_an_int", [q(evidence=[{"doc_id": "d1", "start": "0", "end": 5}])], 1, "evidence[0].start", "valid integer"),
    ("grade_not_an_int", [q(relevance={"d1": 1.5})], 1, "relevance.d1", "valid integer"),
    ("unknown_evidence_key", [q(evidence=[{"doc": "d1"}])], 1, "evidence[0].doc", "allowed: doc_id, start, end"),
    ("unknown_doc", [q(), q(id="q2", evidence=[{"doc_id": "d9"}])], 2, "evidence[0].doc_id", "unknown document 'd9'"),
    ("unknown_relevance_doc", [q(relevance={"d9": 2})], 1, "relevance.d9", "unknown document"),
    ("evidence_graded_zero", [q(relevance={"d1": 0})], 1, "relevance.d1", "grade 0"),
    ("span_past_end", [q(evidence=[{"doc_id": "d1", "start": 6, "end": 400}])], 1, "evidence[0].end", "past the end"),
    ("empty_span", [q(evidence=[{"doc_id": "d1", "start": 6, "end": 6}])], 1, "evidence[0].end", "empty span"),
    ("negative_start", [q(evidence=[{"doc_id": "d1", "start": -1, "end": 6}])], 1, "evidence[0].start", "greater than or equal"),
    ("start_without_end", [q(evidence=[{"doc_id": "d1", "start": 6}])], 1, "evidence[0].end", "both start and end"),
    ("wrong_tenant", [q(tenant="south")], 1, "evidence[0].doc_id", "not visible"),
    ("no_scope_in_common", [q(evidence=[{"doc_id": "d3"}], scopes=["clinical"])], 1, "evidence[0].doc_id", "not visible"),
    ("bad_history_role", [q(history=[{"role": "bot", "content": "hi"}])], 1, "history[0].role", "'user'"),
    ("duplicate_id", [q(), q(id="q2"), q()], 3, "id", "duplicate question id 'qx' (first on line 1)"),
]  # fmt: skip


@pytest.mark.parametrize("case,questions,line,field,words", BAD_QUESTIONS, ids=[c[0] for c in BAD_QUESTIONS])
def test_bad_question_line(
    tmp_path: Path, case: str, questions: list[Any], line: int, field: str | None, words: str
) -> None:
    err = error(tmp_path, questions=questions)
    assert (Path(err.path).name, err.line, err.field) == ("questions.jsonl", line, field)
    assert words in err.message
    assert str(err).endswith(f"questions.jsonl:{line}{f' [{field}]' if field else ''}: {err.message}")


def test_no_questions(tmp_path: Path) -> None:
    err = error(tmp_path, questions=[""])
    assert Path(err.path).name == "questions.jsonl" and "no questions" in err.message


def test_missing_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        load_ragopt_jsonl(tmp_path / "nowhere")
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "questions.jsonl").write_text(json.dumps(q()) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="file not found") as info:
        load_ragopt_jsonl(tmp_path / "only")
    assert Path(info.value.path).name == "corpus.jsonl"
    with pytest.raises(InputError, match="this is the corpus"):
        load_ragopt_jsonl(write(tmp_path / "set") / "corpus.jsonl")
