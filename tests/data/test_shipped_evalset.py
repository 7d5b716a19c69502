"""The shipped evaluation set: reproducible byte for byte from its generator, loadable, and sound."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ragopt.data import EvalSet
from ragopt.data.jsonl import load_ragopt_jsonl
from ragopt.shipped import shipped_dataset
from ragopt.types import visible_to

REPO = Path(__file__).resolve().parents[2]
SHIPPED = shipped_dataset()


def test_the_generator_reproduces_the_committed_files(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "scripts" / "build_hospital.py"), "--out", str(tmp_path)], check=True,
                   capture_output=True)  # fmt: skip
    for name in ("corpus.jsonl", "questions.jsonl", "followups.jsonl", "tool_questions.jsonl", "collection_runs.jsonl"):
        fresh, committed = (tmp_path / name).read_bytes(), (SHIPPED / name).read_bytes()
        assert fresh == committed, f"{name} differs from its generator: run `python scripts/build_hospital.py`"


@pytest.fixture(scope="module")
def hospital() -> EvalSet:
    return load_ragopt_jsonl(SHIPPED)


def test_size_tenants_scopes_and_lengths(hospital: EvalSet) -> None:
    docs, queries = hospital.documents, hospital.queries
    assert len(docs) >= 300 and len(queries) >= 100
    assert {d.tenant for d in docs} == {"north-hospital", "south-hospital", None}
    assert {s for d in docs for s in d.scopes} == {"clinical", "ops", "finance"}
    assert sum(not d.scopes for d in docs) > 0  # and some documents are open to every scope
    assert sum(len(q.evidence) == 2 for q in queries) >= 10
    assert sum(bool(q.query.history) for q in queries) >= 5
    words = [len(d.text.split()) for d in docs]
    assert sum(600 <= n <= 1500 for n in words) >= 20, "long multi-section runbooks"
    assert sum(n < 100 for n in words) >= 100, "short dictionary pages"
    kinds = Counter(d.metadata["kind"] for d in docs)
    assert kinds["field-deprecated"] >= 10, "deprecated near-duplicates of dictionary pages"
    assert (SHIPPED / "corpus.jsonl").stat().st_size < 1_000_000


def test_the_readme_states_the_counts(hospital: EvalSet) -> None:
    readme = (REPO / "docs" / "hospital.md").read_text(encoding="utf-8")
    assert f"| documents | {len(hospital.documents)} |" in readme
    assert f"| questions | {len(hospital.queries)} |" in readme


def test_every_question_is_answerable_by_whoever_asks_it(hospital: EvalSet) -> None:
    docs = hospital.doc_map()
    for q in hospital.queries:
        assert q.query.tenant, f"{q.query.id}: questions on tenant data must name their tenant"
        spans = []
        for e in q.evidence:
            doc = docs[e.doc_id]
            assert e.start is not None and e.end is not None and 0 <= e.start < e.end <= len(doc.text)
            assert visible_to(doc.tenant, doc.scopes, q.query), f"{q.query.id}: evidence {doc.id} is hidden"
            spans.append(doc.text[e.start : e.end])
        for doc_id, grade in q.relevance.items():
            assert grade > 0 and visible_to(docs[doc_id].tenant, docs[doc_id].scopes, q.query), q.query.id
        # every reference answer in this set is extractive: quoted verbatim from one of its evidence spans
        assert q.reference_answer and any(q.reference_answer in span for span in spans), q.query.id


def test_near_duplicates_make_the_tenant_matter(hospital: EvalSet) -> None:
    """The same field name documented by both hospitals with different units, and in a deprecated release."""
    glucose = [d for d in hospital.documents if d.id.split(".")[1:3] == ["field", "LAB_GLU_FAST"]]
    assert {d.tenant for d in glucose} == {"north-hospital", "south-hospital"} and len(glucose) == 3
    units = {line for d in glucose for line in d.text.splitlines() if "Unit" in line}
    assert len(units) == 3  # mmol/L now and mg/dL before in North; mg/dL in South, written as a table row


def test_added_follow_ups_load_against_the_same_corpus_and_all_carry_history() -> None:
    follow_ups = load_ragopt_jsonl(SHIPPED / "followups.jsonl")  # the loader checks evidence and who may see it
    assert len(follow_ups.queries) >= 20 and all(q.query.history for q in follow_ups.queries)
    shipped = {q.query.id for q in load_ragopt_jsonl(SHIPPED).queries}
    assert not shipped & {q.query.id for q in follow_ups.queries}
