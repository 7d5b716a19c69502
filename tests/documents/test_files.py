"""Which files --docs names and how they become documents: folder, glob, file; ids relative to the root;
bad files fail (one InputError naming the file) or are skipped and listed; nothing else is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.documents import PAGE_2_FACT, write_knowledge_base, write_pdf
from ragopt.documents import DocsOptions, load_documents
from ragopt.errors import InputError


def _load(path: Path | str, **kw: str) -> list:  # type: ignore[type-arg]
    return load_documents(DocsOptions(path=str(path), **kw)).documents


def test_a_folder_is_read_recursively_with_ids_relative_to_it(tmp_path: Path) -> None:
    kb = write_knowledge_base(tmp_path / "kb")
    (kb / "sub").mkdir()
    (kb / "sub" / "notes.txt").write_text("Keys are at the front desk.\n", encoding="utf-8")
    (kb / ".git").mkdir()
    (kb / ".git" / "HEAD.txt").write_text("ref: refs/heads/main", encoding="utf-8")
    (kb / "logo.png").write_bytes(b"\x89PNG")
    report = load_documents(DocsOptions(path=str(kb)))
    ids = [d.id for d in report.documents]
    assert ids == sorted(ids, key=lambda i: (i.split("#")[0], i))  # files in sorted order
    assert "sub/notes.txt" in ids and not any(".git" in i for i in ids)
    assert report.ignored == {".png": 1} and report.files == 4
    page2 = next(d for d in report.documents if d.id == "manual.pdf#page=2")
    assert PAGE_2_FACT in page2.text and page2.metadata == {"source": "manual.pdf", "page": 2}
    # moving the folder changes nothing: ids and metadata are relative to it
    moved = tmp_path / "elsewhere"
    kb.rename(moved)
    assert _load(moved) == report.documents


def test_a_glob_and_a_single_file(tmp_path: Path) -> None:
    kb = write_knowledge_base(tmp_path / "kb")
    assert [d.id for d in _load(kb / "*.pdf")] == ["manual.pdf#page=1", "manual.pdf#page=2"]
    assert [d.id for d in _load(kb / "manual.pdf")] == ["manual.pdf#page=1", "manual.pdf#page=2"]
    with pytest.raises(InputError, match="matches no files"):
        _load(kb / "*.docx")
    with pytest.raises(InputError, match="no such file or folder"):
        _load(kb / "missing")
    (kb / "slides.pptx").write_bytes(b"PK")
    with pytest.raises(InputError, match="unsupported kind of file") as err:
        _load(kb / "slides.pptx")
    assert "slides.pptx" in str(err.value)


def _bad_folder(root: Path) -> Path:
    root.mkdir()
    (root / "good.md").write_text("# Title\n\nSome text.\n", encoding="utf-8")
    (root / "latin.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (root / "empty.md").write_text("  \n", encoding="utf-8")
    write_pdf(root / "scan.pdf", ["A page with text.", ""])
    return root


def test_a_bad_file_fails_naming_it_and_skip_lists_every_problem(tmp_path: Path) -> None:
    root = _bad_folder(tmp_path / "docs")
    with pytest.raises(InputError) as err:
        _load(root)
    assert str(err.value).startswith(f"{root / 'empty.md'}: empty file") and "--on-error skip" in str(err.value)
    report = load_documents(DocsOptions(path=str(root), on_error="skip"))
    assert [str(p) for p in report.skipped] == [
        f"{root / 'empty.md'}: empty file (no text)",
        f"{root / 'latin.txt'}: not UTF-8 text (byte 3 is 0xe9); convert it to UTF-8",
        f"{root / 'scan.pdf'}: page 2: no text layer (a scanned image?); run OCR on it first",
    ]
    assert [d.id for d in report.documents] == ["good.md#section=1", "scan.pdf#page=1"]
    assert "skipped 3" in report.summary()


def test_nothing_left_after_skipping_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    with pytest.raises(InputError, match=r"no documents to index \(1 skipped\)"):
        _load(tmp_path, on_error="skip")


def test_a_corpus_among_files_keeps_its_ids_and_a_repeated_id_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "title": "T", "text": "Beir text."}\n', encoding="utf-8")
    (tmp_path / "questions.jsonl").write_text('{"id": "q1"}\n', encoding="utf-8")  # not a corpus: ignored
    (tmp_path / "a.txt").write_text("Plain.", encoding="utf-8")
    docs = _load(tmp_path)
    assert [d.id for d in docs] == ["a.txt", "d1"]
    (tmp_path / "d1").write_text("x", encoding="utf-8")  # no extension: ignored, so no clash
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "corpus.jsonl").write_text('{"id": "d1", "text": "Again."}\n', encoding="utf-8")
    with pytest.raises(InputError, match="document id 'd1' is given twice"):
        _load(tmp_path)
