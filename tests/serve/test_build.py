"""`ragopt serve` over your own documents (ServeOptions.docs): citations name the file and page, and an answer
cached before a document changes is not served after it (the knowledge-base version moves with the content)."""

from __future__ import annotations

from pathlib import Path

import httpx

from fixtures.documents import write_knowledge_base
from fixtures.serving import running_service, served_plan
from ragopt.documents import DocsOptions
from ragopt.serve.build import ServeOptions
from ragopt.serve.service import ServeSettings

STAFF = {"Authorization": "Bearer key-acme-staff"}
QUESTION = {"question": "How long does the backup generator run on one tank of diesel?"}


def _opts(folder: Path) -> ServeOptions:
    return ServeOptions(settings=ServeSettings(), plan=served_plan("extractive"), docs=DocsOptions(path=str(folder)))


def test_citations_name_the_file_and_page(serve_files: dict[str, Path], tmp_path: Path) -> None:
    kb = write_knowledge_base(tmp_path / "kb")
    with running_service(_opts(kb), tmp_path / "ws", serve_files["keys"]) as (url, _):
        out = httpx.post(f"{url}/v1/ask", json=QUESTION, headers=STAFF, timeout=60).json()
    assert "72 hours" in out["answer"]
    assert out["citations"][0]["source"] == "manual.pdf, page 2" and out["citations"][0]["doc_id"] == "manual.pdf#page=2"


def test_an_answer_cached_before_an_edit_is_not_served_after_it(serve_files: dict[str, Path], tmp_path: Path) -> None:
    kb, ws = write_knowledge_base(tmp_path / "kb"), tmp_path / "ws"

    def ask() -> dict:  # type: ignore[type-arg]
        with running_service(_opts(kb), ws, serve_files["keys"]) as (url, service):
            out = httpx.post(f"{url}/v1/ask", json=QUESTION, headers=STAFF, timeout=60).json()
            return {**out, "kb_version": service.kb_version}

    first = ask()
    assert first["trace"]["cache"]["answer"] is False and "72 hours" in first["answer"]
    (kb / "guide.md").touch()  # a new mtime, the same content: the same knowledge base, the cached answer holds
    (kb / "visiting.html").write_bytes((kb / "visiting.html").read_bytes())
    again = ask()
    assert again["trace"]["cache"]["answer"] is True and again["kb_version"] == first["kb_version"]
    pdf = kb / "manual.pdf"
    pdf.write_bytes(pdf.read_bytes().replace(b"72 hours", b"96 hours"))  # same length: the PDF's offsets hold
    edited = ask()
    assert edited["kb_version"] != first["kb_version"]
    assert edited["trace"]["cache"]["answer"] is False and "96 hours" in edited["answer"]
