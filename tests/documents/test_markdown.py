"""Markdown sections at headings (markdown-it-py): heading paths, code blocks, verbatim text."""

from __future__ import annotations

from pathlib import Path

from fixtures.documents import GUIDE_MD
from ragopt.documents.markdown import load


def test_sections_keep_their_heading_path_and_a_hash_in_code_is_no_heading(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text(GUIDE_MD, encoding="utf-8")
    docs, _ = load(tmp_path / "guide.md", "guide.md")
    assert [(d.id, d.metadata["headings"]) for d in docs] == [
        ("guide.md#section=1", ["Facilities guide"]),
        ("guide.md#section=2", ["Facilities guide", "Parking"]),
        ("guide.md#section=3", ["Facilities guide", "Cafeteria"]),
    ]
    assert "# not a heading" in docs[1].text and docs[1].title == "Facilities guide > Parking"
    assert all(d.text in GUIDE_MD for d in docs)  # verbatim slices of the file


def test_a_file_without_headings_is_one_document_and_setext_headings_count(tmp_path: Path) -> None:
    (tmp_path / "plain.md").write_text("Just a paragraph.\n\nAnd another.\n", encoding="utf-8")
    docs, _ = load(tmp_path / "plain.md", "plain.md")
    assert [(d.id, d.title, d.metadata) for d in docs] == [("plain.md", "plain", {"source": "plain.md"})]
    (tmp_path / "setext.md").write_text("Intro text.\n\nTop\n===\n\nUnder top.\n\nSub\n---\n\nUnder sub.\n\n# Next\n\nLast.\n",
                                        encoding="utf-8")
    docs, _ = load(tmp_path / "setext.md", "setext.md")
    assert [(d.text, d.metadata.get("headings")) for d in docs] == [
        ("Intro text.", None), ("Under top.", ["Top"]), ("Under sub.", ["Top", "Sub"]), ("Last.", ["Next"])]
