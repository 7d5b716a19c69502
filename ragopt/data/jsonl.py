"""ragopt's own evaluation format: a folder with `corpus.jsonl` and `questions.jsonl` (docs/evalset-format.md).

Every bad line is an InputError naming the file, the 1-based line and the field; nothing here raises a
traceback on bad data. Lines are UTF-8 (a leading BOM and CRLF line ends are tolerated); blank lines are
skipped; unknown keys are errors, so that a typo such as "scope" never silently unrestricts a document.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragopt.data.evalset import EvalQuery, EvalSet, Evidence
from ragopt.errors import DuplicateKey, InputError
from ragopt.types import EVERYONE, Document, Query, Turn, visible_to

CORPUS = "corpus.jsonl"
QUESTIONS = "questions.jsonl"


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _DocumentLine(_Line):
    id: str = Field(min_length=1)
    text: str
    title: str = ""
    tenant: str | None = None
    scopes: list[str] = []
    metadata: dict[str, Any] = {}


class _EvidenceLine(_Line):
    doc_id: str = Field(min_length=1)
    start: int | None = Field(None, ge=0)
    end: int | None = Field(None, ge=0)


class _TurnLine(_Line):
    role: Literal["user", "assistant", "system"]
    content: str


class _QuestionLine(_Line):
    id: str = Field(min_length=1)
    question: str
    answer: str | None = None
    live_answer: str | None = None  # what a tool's live data answers (ragopt.stages.tool); `answer`: the documents' part
    evidence: list[_EvidenceLine] = Field(min_length=1)
    relevance: dict[str, Annotated[int, Field(ge=0)]] = {}
    tenant: str | None = None
    scopes: list[str] = []
    history: list[_TurnLine] = []


def load_ragopt_jsonl(path: str | Path) -> EvalSet:
    """A folder holding corpus.jsonl and questions.jsonl, or a questions file with corpus.jsonl beside it."""
    path = Path(path)
    if path.is_dir():
        folder, questions_path, name = path, path / QUESTIONS, path.name
    elif path.is_file():
        if path.name == CORPUS:
            raise InputError("this is the corpus; give the folder or a questions file beside it", path=path)
        folder, questions_path = path.parent, path
        name = folder.name if path.name == QUESTIONS else path.stem
    else:
        raise InputError("file not found", path=path)
    documents = load_corpus(folder / CORPUS)
    queries = _load_questions(questions_path, {d.id: d for d in documents})
    return EvalSet(name=name, source=str(path), documents=documents, queries=queries)


def dump_ragopt_jsonl(evalset: EvalSet, folder: str | Path) -> Path:
    """Write `evalset` as a ragopt eval folder (defaults left out), so that loading it gives it back."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / CORPUS, "w", encoding="utf-8", newline="\n") as f:
        for d in evalset.documents:
            row = {
                "id": d.id,
                "title": d.title,
                "text": d.text,
                "tenant": d.tenant,
                "scopes": list(d.scopes),
                "metadata": d.metadata,
            }
            f.write(_json_line(row))
    with open(folder / QUESTIONS, "w", encoding="utf-8", newline="\n") as f:
        for q in evalset.queries:
            row = {
                "id": q.query.id,
                "question": q.query.text,
                "answer": q.reference_answer,
                "live_answer": q.live_reference,
                "evidence": [e.model_dump(exclude_none=True) for e in q.evidence],
                "relevance": q.relevance if q.relevance != _default_relevance(q.evidence) else {},
                "tenant": q.query.tenant,
                "scopes": list(q.query.scopes),
                "history": [t.model_dump() for t in q.query.history],
            }
            f.write(_json_line(row))
    return folder


# What a writer leaves out: the loader fills these in.
_DEFAULTS: dict[str, Any] = {
    "title": "", "answer": None, "live_answer": None, "tenant": None, "scopes": [], "metadata": {}, "relevance": {}, "history": []
}


def _json_line(row: dict[str, Any]) -> str:
    kept = {k: v for k, v in row.items() if k not in _DEFAULTS or v != _DEFAULTS[k]}
    return json.dumps(kept, ensure_ascii=False) + "\n"


def _default_relevance(evidence: list[Evidence]) -> dict[str, int]:
    return {e.doc_id: 1 for e in evidence}


class _Where:
    """Makes the errors of one line: `where(message, field)` is an InputError naming file, line and field."""

    def __init__(self, path: Path, line: int):
        self.path, self.line = path, line

    def __call__(self, message: str, field: str | None = None) -> InputError:
        return InputError(message, path=self.path, line=self.line, field=field)


def read_lines(path: Path) -> Iterator[tuple[_Where, dict[str, Any]]]:
    """Each non-blank line of a UTF-8 JSONL file as (where it is, its JSON object)."""
    if not path.is_file():
        raise InputError("file not found", path=path)
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            where = _Where(path, n)
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise where(f"not UTF-8 (byte {exc.start + 1} of the line)") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line, object_pairs_hook=_no_duplicate_keys)
            except json.JSONDecodeError as exc:
                raise where(f"malformed JSON: {exc.msg} (column {exc.colno})") from None
            except DuplicateKey as exc:
                raise where("key given twice", str(exc)) from None
            if not isinstance(obj, dict):
                raise where(f"expected a JSON object, got {type(obj).__name__}")
            yield where, obj


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKey(key)
        obj[key] = value
    return obj


def _parse(model: type[_Line], obj: dict[str, Any], where: _Where) -> Any:
    """Validate one line; the first problem becomes an InputError naming its field (e.g. `evidence[0].end`)."""
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        errors = exc.errors()
        # A typo gives both "unknown field" and "missing field"; the unknown one says more.
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
        if err["type"] == "missing":
            message = "missing required field"
        elif err["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(model, err["loc"]))
            message = f"unknown field (allowed: {allowed})"
        else:
            message = err["msg"]
        raise where(message, field or None) from None


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed where the unknown key `loc[-1]` sits (it may be inside evidence or history items)."""
    nested = {("evidence",): _EvidenceLine, ("history",): _TurnLine}
    parent = tuple(p for p in loc[:-1] if not isinstance(p, int))
    return list(nested.get(parent, model).model_fields)


def _check_access(tenant: str | None, scopes: list[str], where: _Where) -> None:
    if tenant is not None and (not tenant.strip() or tenant == EVERYONE):
        raise where(f"tenant must be a name or null, not {tenant!r}", "tenant")
    for i, scope in enumerate(scopes):
        if not scope.strip() or scope == EVERYONE:
            raise where(f"scope must be a name, not {scope!r}", f"scopes[{i}]")


def load_corpus(path: Path) -> list[Document]:
    docs: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    for where, obj in read_lines(path):
        row: _DocumentLine = _parse(_DocumentLine, obj, where)
        if row.id in first_line:
            raise where(f"duplicate document id {row.id!r} (first on line {first_line[row.id]})", "id")
        _check_access(row.tenant, row.scopes, where)
        docs[row.id] = Document(
            id=row.id, text=row.text, title=row.title, tenant=row.tenant, scopes=row.scopes, metadata=row.metadata
        )
        first_line[row.id] = where.line
    if not docs:
        raise InputError("empty corpus: no documents", path=path)
    return list(docs.values())


def _load_questions(path: Path, docs: dict[str, Document]) -> list[EvalQuery]:
    queries: list[EvalQuery] = []
    first_line: dict[str, int] = {}
    for where, obj in read_lines(path):
        row: _QuestionLine = _parse(_QuestionLine, obj, where)
        if row.id in first_line:
            raise where(f"duplicate question id {row.id!r} (first on line {first_line[row.id]})", "id")
        first_line[row.id] = where.line
        if not row.question.strip():
            raise where("question is blank", "question")
        _check_access(row.tenant, row.scopes, where)
        query = Query(
            id=row.id,
            text=row.question,
            tenant=row.tenant,
            scopes=row.scopes,
            history=[Turn(role=t.role, content=t.content) for t in row.history],
        )
        evidence = [_check_evidence(e, f"evidence[{i}]", docs, query, where) for i, e in enumerate(row.evidence)]
        relevance = _default_relevance(evidence)
        for doc_id, grade in row.relevance.items():
            if doc_id not in docs:
                raise where(f"unknown document {doc_id!r} (not in {CORPUS})", f"relevance.{doc_id}")
            if grade == 0 and doc_id in relevance:
                raise where("an evidence document cannot have grade 0", f"relevance.{doc_id}")
            relevance[doc_id] = grade
        queries.append(EvalQuery(query=query, relevance=relevance, evidence=evidence, reference_answer=row.answer,
                                 live_reference=row.live_answer))
    if not queries:
        raise InputError("no questions", path=path)
    return queries


def _check_evidence(e: _EvidenceLine, field: str, docs: dict[str, Document], query: Query, where: _Where) -> Evidence:
    doc = docs.get(e.doc_id)
    if doc is None:
        raise where(f"unknown document {e.doc_id!r} (not in {CORPUS})", f"{field}.doc_id")
    if not visible_to(doc.tenant, doc.scopes, query):
        raise where(
            f"document {e.doc_id!r} (tenant {doc.tenant}, scopes {list(doc.scopes)}) is not visible to "
            f"the question's tenant {query.tenant} and scopes {list(query.scopes)}",
            f"{field}.doc_id",
        )
    if (e.start is None) != (e.end is None):
        raise where("a span needs both start and end", f"{field}.{'end' if e.end is None else 'start'}")
    if e.start is not None and e.end is not None:
        if e.start >= e.end:
            raise where(f"empty span: start {e.start} is not before end {e.end}", f"{field}.end")
        if e.end > len(doc.text):
            raise where(f"span end {e.end} is past the end of {e.doc_id!r} ({len(doc.text)} chars)", f"{field}.end")
    return Evidence(doc_id=e.doc_id, start=e.start, end=e.end)
