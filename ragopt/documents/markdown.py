"""Markdown files, cut into sections at their headings with markdown-it-py (CommonMark).

The parser finds the headings (ATX `#` and Setext underlines, and never a `#` line inside a code block, which
a line-based split would take for one); each section's text is its source lines, Markdown as written, so an
evidence span is a verbatim slice of the file.
"""

from __future__ import annotations

from pathlib import Path

from ragopt.documents.loaded import Problem, read_text
from ragopt.documents.sections import HeadingPath, Section, section_documents
from ragopt.types import Document


def sections(text: str) -> list[Section]:
    from markdown_it import MarkdownIt

    lines = text.splitlines(keepends=True)
    tokens = MarkdownIt("commonmark").parse(text)
    headings = [(tok.map, int(tok.tag[1]), tokens[i + 1].content.strip())
                for i, tok in enumerate(tokens) if tok.type == "heading_open" and tok.map]
    out = [Section([], "".join(lines[: headings[0][0][0]] if headings else lines))]
    path = HeadingPath()
    for i, ((_, end), level, title) in enumerate(headings):
        stop = headings[i + 1][0][0] if i + 1 < len(headings) else len(lines)
        out.append(Section(path.enter(level, title), "".join(lines[end:stop])))
    return out


def load(path: Path, rel: str) -> tuple[list[Document], list[Problem]]:
    return section_documents(rel, sections(read_text(path)), path.stem), []
