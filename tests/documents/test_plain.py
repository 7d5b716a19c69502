"""Plain text: UTF-8 with a BOM tolerated; other encodings and blank files are bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.errors import BadFile
from ragopt.documents.plain import load


def test_utf8_with_a_bom_is_one_document(tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_bytes("\ufeffNaïve café.\n".encode("utf-8"))
    docs, _ = load(tmp_path / "n.txt", "n.txt")
    assert [(d.id, d.text, d.metadata) for d in docs] == [("n.txt", "Naïve café.", {"source": "n.txt"})]


@pytest.mark.parametrize("content, reason", [
    ("Grüße".encode("utf-16"), "not UTF-8 text (byte 0 is 0xff)"),
    (b"\n \t\n", "empty file"),
])
def test_undecodable_and_blank(tmp_path: Path, content: bytes, reason: str) -> None:
    (tmp_path / "b.txt").write_bytes(content)
    with pytest.raises(BadFile, match=reason.replace("(", r"\(").replace(")", r"\)")):
        load(tmp_path / "b.txt", "b.txt")
