"""Plain text files: one document each, UTF-8 (see loaded.read_text)."""

from __future__ import annotations

from pathlib import Path

from ragopt.documents.loaded import Problem, read_text
from ragopt.types import Document


def load(path: Path, rel: str) -> tuple[list[Document], list[Problem]]:
    text = read_text(path)
    return [Document(id=rel, title=path.stem, text=text.strip(), metadata={"source": rel})], []
