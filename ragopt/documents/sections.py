"""Sections of a structured file (Markdown, HTML) as documents that keep their heading path.

A section is the text under one heading, up to the next heading; its heading path is that heading and the
headings it sits under. A file with headings becomes one document per non-empty section, `guide.md#section=N`
(N counts sections from 1 in file order); a file without headings is one document, `guide.md`.
"""

from __future__ import annotations

from dataclasses import dataclass
from ragopt.errors import BadFile
from ragopt.types import Document


@dataclass
class Section:
    headings: list[str]  # outermost first; empty for text before the first heading
    text: str


class HeadingPath:
    """The stack of open headings: a heading of level n closes every open heading of level >= n."""

    def __init__(self) -> None:
        self._open: list[tuple[int, str]] = []

    def enter(self, level: int, title: str) -> list[str]:
        self._open = [(lv, t) for lv, t in self._open if lv < level] + [(level, title)]
        return [t for _, t in self._open]


def section_documents(rel: str, sections: list[Section], fallback_title: str = "") -> list[Document]:
    kept = [s for s in sections if s.text.strip()]
    if not kept:
        raise BadFile("empty file (no text)")
    single = len(kept) == 1 and not kept[0].headings
    docs = []
    for n, s in enumerate(kept, start=1):
        metadata: dict[str, object] = {"source": rel}
        if s.headings:
            metadata["headings"] = s.headings
        docs.append(Document(
            id=rel if single else f"{rel}#section={n}",
            title=" > ".join(s.headings) if s.headings else fallback_title,
            text=s.text.strip(),
            metadata=metadata,
        ))
    return docs

