"""PDF pages with pypdf: one document per page; broken, encrypted and empty files and pages without text."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.documents import write_encrypted_pdf, write_pdf
from ragopt.errors import BadFile
from ragopt.documents.pdf import load


def test_pages_become_documents_numbered_from_one(tmp_path: Path) -> None:
    path = write_pdf(tmp_path / "g.pdf", ["First (page) one.", "Second page\nwith two lines."])
    docs, problems = load(path, "dir/g.pdf")
    assert problems == []
    assert [(d.id, d.metadata["page"], d.text) for d in docs] == [
        ("dir/g.pdf#page=1", 1, "First (page) one."),
        ("dir/g.pdf#page=2", 2, "Second page\nwith two lines."),
    ]


def test_a_page_without_text_is_a_problem_of_that_page_only(tmp_path: Path) -> None:
    docs, problems = load(write_pdf(tmp_path / "s.pdf", ["", "Text on two."]), "s.pdf")
    assert [d.id for d in docs] == ["s.pdf#page=2"]
    assert [(p.page, p.reason.split(" (")[0]) for p in problems] == [(1, "no text layer")]


@pytest.mark.parametrize("content, reason", [
    (b"", "empty file"),
    (b"%PDF-1.4\n1 0 obj << /Type /Catalog", "not a readable PDF"),
    (b"hello, I am plain text", "not a readable PDF"),
])
def test_broken_and_empty_files(tmp_path: Path, content: bytes, reason: str) -> None:
    (tmp_path / "b.pdf").write_bytes(content)
    with pytest.raises(BadFile, match=reason):
        load(tmp_path / "b.pdf", "b.pdf")


def test_an_encrypted_pdf_needs_its_password_but_an_empty_password_is_tried(tmp_path: Path) -> None:
    with pytest.raises(BadFile, match="encrypted PDF: it needs a password"):
        load(write_encrypted_pdf(tmp_path / "e.pdf", ["Secret."]), "e.pdf")
    docs, _ = load(write_encrypted_pdf(tmp_path / "open.pdf", ["Readable."], password=""), "open.pdf")
    assert [d.text for d in docs] == ["Readable."]
