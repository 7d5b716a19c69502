"""BEIR folders: corpus.jsonl, queries.jsonl, qrels/<split>.tsv (header row; CRLF tolerated).

Relevance is graded; grade 0 means judged not relevant. Queries without qrels in the split are skipped.
Where a SciFact-style `original_format/corpus.jsonl` (abstracts as sentence lists) sits beside the corpus
and queries carry sentence evidence in their metadata, that evidence becomes char spans of the text. A query
whose metadata lists `answers` (HotpotQA's conversion) has the first one as its reference answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from ragopt.data.evalset import EvalQuery, EvalSet, Evidence
from ragopt.data.jsonl import read_lines
from ragopt.errors import InputError
from ragopt.types import Document, Query


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line; bad UTF-8, malformed JSON or a repeated key is an InputError."""
    for where, obj in read_lines(path):
        yield where.line, obj


def _field(obj: dict[str, Any], name: str, path: Path, line: int) -> str:
    if name not in obj:
        raise InputError("missing field", path=path, line=line, field=name)
    value = obj[name]
    if not isinstance(value, (str, int)):
        raise InputError(f"expected a string, got {type(value).__name__}", path=path, line=line, field=name)
    return str(value)


def load_corpus(path: Path) -> list[Document]:
    docs: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    for n, obj in read_jsonl(path):
        doc_id = _field(obj, "_id", path, n)
        if doc_id in first_line:
            raise InputError(
                f"duplicate document id {doc_id!r} (first on line {first_line[doc_id]})", path=path, line=n, field="_id"
            )
        first_line[doc_id] = n
        docs[doc_id] = Document(id=doc_id, title=str(obj.get("title") or ""), text=_field(obj, "text", path, n))
    if not docs:
        raise InputError("empty corpus: no documents", path=path)
    return list(docs.values())


def load_qrels(path: Path, doc_ids: set[str], query_ids: set[str]) -> dict[str, dict[str, int]]:
    if not path.exists():
        raise InputError("qrels file not found", path=path)
    qrels: dict[str, dict[str, int]] = {}
    first_line: dict[tuple[str, str], int] = {}
    with open(path, encoding="utf-8", newline=None) as f:
        for n, line in enumerate(f, start=1):
            row = line.rstrip("\r\n").split("\t")
            if not line.strip() or (n == 1 and row[0] == "query-id"):
                continue
            if len(row) != 3:
                raise InputError(f"expected 3 tab-separated columns, got {len(row)}", path=path, line=n)
            qid, did, grade = row
            if did not in doc_ids:
                raise InputError(f"unknown document {did!r}", path=path, line=n, field="corpus-id")
            if qid not in query_ids:
                raise InputError(f"unknown query {qid!r}", path=path, line=n, field="query-id")
            if (qid, did) in first_line:
                raise InputError(
                    f"duplicate judgment of query {qid!r} and document {did!r} (first on line {first_line[qid, did]})",
                    path=path, line=n, field="corpus-id",
                )
            first_line[qid, did] = n
            try:
                qrels.setdefault(qid, {})[did] = int(grade)
            except ValueError:
                raise InputError(f"relevance must be an integer, got {grade!r}", path=path, line=n, field="score") from None
    return qrels


def load_queries(path: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """Query id -> (line number, object); a repeated id is an InputError naming both lines."""
    queries: dict[str, tuple[int, dict[str, Any]]] = {}
    for n, obj in read_jsonl(path):
        qid = _field(obj, "_id", path, n)
        if qid in queries:
            raise InputError(f"duplicate query id {qid!r} (first on line {queries[qid][0]})", path=path, line=n, field="_id")
        queries[qid] = (n, obj)
    return queries


def _sentence_spans(folder: Path, docs: dict[str, Document]) -> dict[str, list[tuple[int, int]]]:
    """Char spans of each abstract sentence inside the BEIR text (sentences stripped, joined by spaces)."""
    original = folder / "original_format" / "corpus.jsonl"
    if not original.exists():
        return {}
    spans: dict[str, list[tuple[int, int]]] = {}
    for _, obj in read_jsonl(original):
        doc = docs.get(str(obj.get("doc_id")))
        if doc is None:
            continue
        out, pos = [], 0
        for sentence in (s.strip() for s in obj.get("abstract", [])):
            start = doc.text.find(sentence, pos)
            if start < 0:
                out = []  # texts disagree: no spans rather than wrong spans
                break
            out.append((start, start + len(sentence)))
            pos = start + len(sentence)
        if out:
            spans[doc.id] = out
    return spans


def load_beir(folder: str | Path, split: str = "test") -> EvalSet:
    folder = Path(folder)
    corpus = load_corpus(folder / "corpus.jsonl")
    docs = {d.id: d for d in corpus}
    queries_path = folder / "queries.jsonl"
    raw_queries = load_queries(queries_path)
    qrels = load_qrels(folder / "qrels" / f"{split}.tsv", set(docs), set(raw_queries))
    sentences = _sentence_spans(folder, docs)
    queries = []
    for qid, (n, obj) in raw_queries.items():
        if qid not in qrels:
            continue
        evidence = []
        metadata = obj.get("metadata") or {}
        answers = metadata.get("answers") if isinstance(metadata, dict) else None
        for doc_id, sets in metadata.items() if isinstance(metadata, dict) else ():
            if doc_id not in sentences or not isinstance(sets, list):
                continue
            for ev in sets:
                for i in ev.get("sentences", []) if isinstance(ev, dict) else []:
                    if 0 <= i < len(sentences[doc_id]):
                        s, e = sentences[doc_id][i]
                        evidence.append(Evidence(doc_id=doc_id, start=s, end=e))
        queries.append(
            EvalQuery(
                query=Query(id=qid, text=_field(obj, "text", queries_path, n)),
                relevance=qrels[qid],
                evidence=evidence,
                reference_answer=answers[0] if isinstance(answers, list) and answers and isinstance(answers[0], str) else None,
            )
        )
    name = folder.parent.name if folder.name == "beir_format" else folder.name  # HotpotQA's conversion folder
    return EvalSet(name=name, source=str(folder), documents=corpus, queries=queries)
