"""HTML pages, with BeautifulSoup (Python's own html.parser underneath: no compiled parser to install).

Page furniture (script, style, nav, header, footer, aside, forms) is dropped; the main text is `<main>` or
`<article>` where the page has one, else `<body>`. Text is gathered block by block (a paragraph, list item,
table cell... is one line) and cut into sections at h1-h6, as Markdown is. The page's encoding comes from
its bytes (BOM, `<meta charset>`, else a guess); a page that decodes only with replacement characters is a
bad file.
"""

from __future__ import annotations

from pathlib import Path

from ragopt.documents.loaded import Problem
from ragopt.errors import BadFile
from ragopt.documents.sections import HeadingPath, Section, section_documents
from ragopt.types import Document

_FURNITURE = ["script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "svg", "iframe"]
_HEADINGS = {f"h{n}" for n in range(1, 7)}
_BLOCKS = _HEADINGS | {
    "p", "div", "li", "pre", "td", "th", "tr", "dt", "dd", "blockquote", "figcaption", "caption", "section",
    "article", "main", "body", "table", "ul", "ol", "dl", "address", "details", "summary", "html",
}


def _block_of(string):  # type: ignore[no-untyped-def]
    return next((p for p in string.parents if p.name in _BLOCKS), None)


def _joined(lines: list[str]) -> str:
    return "\n".join(line for line in lines if line.strip())


def sections(soup) -> list[Section]:  # type: ignore[no-untyped-def]
    for tag in soup(_FURNITURE):
        tag.decompose()
    root = soup.find("main") or soup.find("article") or soup.body or soup
    out = [Section([], "")]
    path, lines, block, heading = HeadingPath(), [""], None, None
    for string in root.strings:
        if not string.strip():
            continue
        owner = _block_of(string)
        if owner is not None and owner.name in _HEADINGS:
            if owner is not heading:  # a heading closes the section before it
                out[-1].text, lines = _joined(lines), [""]
                out.append(Section(path.enter(int(owner.name[1]), " ".join(owner.get_text(" ").split())), ""))
                heading = owner
            block = owner
            continue
        if owner is not block:  # each block (paragraph, list item, cell...) is a line of its own
            lines.append("")
            block = owner
        if owner is not None and owner.name == "pre":
            lines[-1] += str(string)
        else:
            lines[-1] = f"{lines[-1]} {' '.join(string.split())}".strip()
    out[-1].text = _joined(lines)
    return out


def load(path: Path, rel: str) -> tuple[list[Document], list[Problem]]:
    from bs4 import BeautifulSoup

    raw = path.read_bytes()
    if not raw.strip():
        raise BadFile("empty file (no text)")
    soup = BeautifulSoup(raw, "html.parser")
    if getattr(soup, "contains_replacement_characters", False):
        raise BadFile(f"undecodable text (read as {soup.original_encoding} with replacement characters)")
    title = " ".join(soup.title.get_text().split()) if soup.title else path.stem
    return section_documents(rel, sections(soup), title), []
