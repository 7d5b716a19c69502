"""The BEIR loader: CRLF qrels, graded relevance with 0 = not relevant, title + text, queries without qrels
skipped; bad input is an InputError naming the file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from ragopt.data import load_evalset
from ragopt.data.beir import load_beir
from ragopt.errors import InputError
from ragopt.eval.metrics import evaluate_run

from fixtures.tiny_corpus import TINY_DOCS, TINY_QRELS, TINY_QUERIES


def test_loads_tiny_folder_with_crlf_qrels_and_graded_relevance(tiny_beir: Path) -> None:
    assert b"\r\n" in (tiny_beir / "qrels" / "test.tsv").read_bytes()
    es = load_beir(tiny_beir)
    assert es.name == "tiny" and es.source == str(tiny_beir)
    assert [d.id for d in es.documents] == [d["_id"] for d in TINY_DOCS]
    d1 = es.documents[0]
    assert (d1.title, d1.text) == ("Photosynthesis", TINY_DOCS[0]["text"])
    assert [q.query.id for q in es.queries] == [f"q{i}" for i in range(1, 9)]  # q9 has no qrels: skipped
    q1 = es.queries[0]
    assert q1.query.text == "How do plants make glucose from sunlight?"
    assert q1.relevance == {"d1": 2, "d11": 0}  # the grade is kept; no trailing "\r" in ids or grades
    assert es.queries[1].relevance == {"d2": 2, "d12": 1}
    assert all(q.evidence == [] for q in es.queries)
    assert load_evalset(tiny_beir).queries == es.queries  # the generic entry point detects BEIR


def test_grade_zero_is_judged_not_relevant(tiny_beir: Path) -> None:
    es = load_beir(tiny_beir)
    qrels = {q.query.id: q.relevance for q in es.queries}
    # ranking the grade-0 document first earns nothing; the relevant one second earns 2 / log2(3) of 2
    scores = evaluate_run({"q1": ["d11", "d1"]}, {"q1": qrels["q1"]}, ["recall@1", "ndcg@10", "mrr@10"])
    assert scores["recall@1"] == [0.0] and scores["mrr@10"] == [0.5]
    assert scores["ndcg@10"][0] == pytest.approx(1 / 1.5849625, rel=1e-6)


def test_lf_and_crlf_everywhere_load_the_same(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    lf = load_beir(beir_writer(tmp_path / "lf", newline="\n", qrels_newline="\n"))
    crlf = load_beir(beir_writer(tmp_path / "crlf", newline="\r\n", qrels_newline="\r\n"))
    assert lf.documents == crlf.documents and lf.queries == crlf.queries


def test_other_splits_blank_lines_and_integer_ids(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    docs = [{"_id": 7, "title": None, "text": "Seven."}, "", {"_id": "8", "text": "Eight."}]
    folder = beir_writer(tmp_path / "x", docs=docs, queries=[{"_id": 1, "text": "seven?"}], qrels=[("1", "7", 1)], split="dev")
    es = load_beir(folder, split="dev")
    assert [d.id for d in es.documents] == ["7", "8"] and es.documents[0].title == ""
    assert es.queries[0].relevance == {"7": 1}
    with pytest.raises(InputError, match="qrels file not found") as err:
        load_beir(folder, split="test")
    assert err.value.path == str(folder / "qrels" / "test.tsv")


def bad(tmp_path: Path, writer: Callable[..., Path], **kw: object) -> InputError:
    with pytest.raises(InputError) as err:
        load_beir(writer(tmp_path / "bad", **kw))
    return err.value


def test_malformed_jsonl_line_names_file_and_line(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    docs = [json.dumps(TINY_DOCS[0]), json.dumps(TINY_DOCS[1]), '{"_id": "d3", "text": "unterminated']
    err = bad(tmp_path, beir_writer, docs=docs)
    assert err.path == str(tmp_path / "bad" / "corpus.jsonl") and err.line == 3
    assert "malformed JSON" in str(err) and str(err).startswith(f"{tmp_path / 'bad' / 'corpus.jsonl'}:3")
    assert bad(tmp_path, beir_writer, queries=[*TINY_QUERIES[:2], "[1, 2]"]).line == 3  # not an object


def test_qrels_naming_an_unknown_doc(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    err = bad(tmp_path, beir_writer, qrels=[*TINY_QRELS[:3], ("q2", "d404", 1)])
    assert err.path == str(tmp_path / "bad" / "qrels" / "test.tsv")
    assert err.line == 5 and err.field == "corpus-id" and "'d404'" in str(err)  # header is line 1


def test_qrels_bad_rows(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    err = bad(tmp_path, beir_writer, qrels=[("q1", "d1", 1), ("q404", "d1", 1)])
    assert (err.line, err.field) == (3, "query-id")
    err = bad(tmp_path, beir_writer, qrels=[("q1", "d1", "high")])
    assert (err.line, err.field) == (2, "score")
    err = bad(tmp_path, beir_writer, qrels=["q1\td1"])
    assert err.line == 2 and "3 tab-separated columns" in str(err)


def test_empty_corpus(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    err = bad(tmp_path, beir_writer, docs=[], qrels=[])
    assert err.path == str(tmp_path / "bad" / "corpus.jsonl") and "empty corpus" in str(err)
    err = bad(tmp_path, beir_writer, docs=["", "   "], qrels=[])  # blank lines only
    assert "empty corpus" in str(err)


def test_duplicate_doc_ids(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    err = bad(tmp_path, beir_writer, docs=[*TINY_DOCS[:4], {"_id": "d2", "text": "again"}])
    assert (err.line, err.field) == (5, "_id") and "duplicate document id 'd2'" in str(err)
    assert str(err) == f"{tmp_path / 'bad' / 'corpus.jsonl'}:5 [_id]: duplicate document id 'd2' (first on line 2)"


def test_duplicate_query_ids_name_both_lines(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    err = bad(tmp_path, beir_writer, queries=[*TINY_QUERIES[:3], {"_id": "q2", "text": "asked twice"}])
    assert err.path == str(tmp_path / "bad" / "queries.jsonl")
    assert (err.line, err.field) == (4, "_id") and "duplicate query id 'q2' (first on line 2)" in str(err)


def test_duplicate_qrels_rows_are_errors_not_overwrites(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    # the same judgment twice with different grades: which one counts would be silent guesswork
    err = bad(tmp_path, beir_writer, qrels=[("q1", "d1", 2), ("q2", "d2", 1), ("q1", "d1", 0)])
    assert err.path == str(tmp_path / "bad" / "qrels" / "test.tsv")
    assert err.line == 4 and "duplicate judgment of query 'q1' and document 'd1' (first on line 2)" in str(err)
    # the same document judged for two queries is fine
    es = load_beir(beir_writer(tmp_path / "ok", qrels=[("q1", "d1", 2), ("q2", "d1", 1)]))
    assert [q.relevance for q in es.queries] == [{"d1": 2}, {"d1": 1}]


def test_missing_and_mistyped_fields(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    err = bad(tmp_path, beir_writer, docs=[TINY_DOCS[0], {"_id": "d2", "title": "no text"}])
    assert (err.line, err.field) == (2, "text") and "missing field" in str(err)
    err = bad(tmp_path, beir_writer, docs=[TINY_DOCS[0], {"_id": ["d2"], "text": "x"}])
    assert (err.line, err.field) == (2, "_id")
    err = bad(tmp_path, beir_writer, queries=[{"_id": "q1"}], qrels=[("q1", "d1", 1)])
    assert (err.path, err.line, err.field) == (str(tmp_path / "bad" / "queries.jsonl"), 1, "text")


def test_a_missing_file_is_named(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    folder = beir_writer(tmp_path / "nq")
    (folder / "queries.jsonl").unlink()
    with pytest.raises(InputError, match="file not found") as err:
        load_beir(folder)
    assert err.value.path == str(folder / "queries.jsonl")


def test_sentence_evidence_from_original_format(tmp_path: Path, beir_writer: Callable[..., Path]) -> None:
    """SciFact layout: abstracts as sentence lists beside the corpus; query metadata names sentence indices."""
    sentences = ["Aspirin lowers fever. ", " It also thins the blood.", "Doses vary by age."]
    text = " ".join(s.strip() for s in sentences)
    folder = beir_writer(
        tmp_path / "sf",
        docs=[{"_id": "10", "title": "Aspirin", "text": text}, {"_id": "11", "text": "Other."}],
        queries=[{"_id": "c1", "text": "Aspirin thins blood", "metadata": {"10": [{"sentences": [1, 2], "label": "SUPPORT"}]}},
                 {"_id": "c2", "text": "no evidence", "metadata": {}}],
        qrels=[("c1", "10", 1), ("c2", "11", 1)],
    )  # fmt: skip
    (folder / "original_format").mkdir()
    (folder / "original_format" / "corpus.jsonl").write_text(
        json.dumps({"doc_id": 10, "title": "Aspirin", "abstract": sentences}) + "\n", encoding="utf-8"
    )
    c1, c2 = load_beir(folder).queries
    assert [(e.doc_id, text[e.start : e.end]) for e in c1.evidence] == [("10", "It also thins the blood."), ("10", "Doses vary by age.")]  # type: ignore[index]
    assert c2.evidence == []
