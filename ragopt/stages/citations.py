"""Citations: `[n]` markers in an answer, resolved to the chunk and document of passage n.

Accepted forms: `[1]`, `[1][2]`, `[1, 3]`, `[1-3]` (a range, at most 20 wide), `[Passage 2]`. A marker whose
number names no passage that was given to the model (never provided, or dropped by the token budget) is
kept with `valid=False`, so evaluation can count citations to passages the model never saw.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from ragopt.types import Chunk, Citation, source_label

_MARKER = re.compile(r"\[\s*(?:passages?|source|doc)?\s*(\d{1,3}(?:\s*(?:,|;|-|\u2013)\s*(?:passages?\s*)?\d{1,3})*)\s*\]", re.IGNORECASE)
_MARKER_AND_SPACE = re.compile(r"[ \t]*" + _MARKER.pattern, re.IGNORECASE)  # the space before a marker goes with it
_MAX_RANGE = 20


def marker_spans(text: str) -> list[tuple[int, int, list[int]]]:
    """Each marker's (start, end) char span and the numbers it cites, ranges expanded, in text order."""
    out = []
    for m in _MARKER.finditer(text):
        nums: list[int] = []
        for part in re.split(r"\s*[,;]\s*", m.group(1)):
            part = re.sub(r"(?i)passages?\s*", "", part)
            bounds = re.split(r"\s*[-\u2013]\s*", part)
            if len(bounds) == 2:
                lo, hi = int(bounds[0]), int(bounds[1])
                nums.extend(range(lo, hi + 1) if 0 <= hi - lo < _MAX_RANGE else [lo, hi])
            else:
                nums.append(int(bounds[0]))
        out.append((m.start(), m.end(), nums))
    return out


def marker_numbers(text: str) -> list[int]:
    """Every cited number in order of first appearance, ranges expanded, duplicates removed."""
    return list(dict.fromkeys(n for _, _, nums in marker_spans(text) for n in nums))


def strip_markers(text: str) -> str:
    """The text without its markers (and the spaces just before them), trimmed."""
    return _MARKER_AND_SPACE.sub("", text).strip()


def parse_citations(text: str, passages: Mapping[int, Chunk]) -> list[Citation]:
    """Resolve markers against the passages the model was given: {number: chunk}."""
    cites = []
    for n in marker_numbers(text):
        chunk = passages.get(n)
        if chunk is None:
            cites.append(Citation(marker=n, valid=False))
        else:
            cites.append(Citation(marker=n, chunk_id=chunk.id, doc_id=chunk.doc_id, valid=True,
                                 source=source_label(chunk.metadata)))
    return cites


def invalid_markers(citations: Sequence[Citation]) -> list[int]:
    return [c.marker for c in citations if not c.valid]


def format_citations(citations: Sequence[Citation], titles: Mapping[int, str] | None = None) -> list[str]:
    """One line per citation, for printing: `[2] doc-17 (Title)`, `[1] guide.pdf, page 2 (guide)` for a loaded
    file, or `[9] (no such passage)`."""
    lines = []
    for c in citations:
        if not c.valid:
            lines.append(f"[{c.marker}] (no such passage was provided)")
            continue
        title = (titles or {}).get(c.marker, "")
        lines.append(f"[{c.marker}] {c.source or c.doc_id}" + (f" ({title})" if title else "") + f"  chunk {c.chunk_id}")
    return lines
