"""Citations: `[n]` markers in an answer, resolved to the chunk and document of passage n.

Accepted forms: `[1]`, `[1][2]`, `[1, 3]`, `[1-3]` (a range, at most 20 wide), `[Passage 2]`. A marker whose
number names no passage that was given to the model (never provided, or dropped by the token budget) is
kept with `valid=False`, so evaluation can count citations to passages the model never saw.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from ragopt.types import Chunk, Citation

_MARKER = re.compile(r"\[\s*(?:passages?|source|doc)?\s*(\d{1,3}(?:\s*(?:,|;|-|\u2013)\s*(?:passages?\s*)?\d{1,3})*)\s*\]", re.IGNORECASE)
_MAX_RANGE = 20


def marker_numbers(text: str) -> list[int]:
    """Every cited number in order of first appearance, ranges expanded, duplicates removed."""
    out: list[int] = []
    seen: set[int] = set()
    for m in _MARKER.finditer(text):
        for part in re.split(r"\s*[,;]\s*", m.group(1)):
            part = re.sub(r"(?i)passages?\s*", "", part)
            bounds = re.split(r"\s*[-\u2013]\s*", part)
            if len(bounds) == 2:
                lo, hi = int(bounds[0]), int(bounds[1])
                nums = list(range(lo, hi + 1)) if 0 <= hi - lo < _MAX_RANGE else [lo, hi]
            else:
                nums = [int(bounds[0])]
            for n in nums:
                if n not in seen:
                    seen.add(n)
                    out.append(n)
    return out


def parse_citations(text: str, passages: Mapping[int, Chunk]) -> list[Citation]:
    """Resolve markers against the passages the model was given: {number: chunk}."""
    cites = []
    for n in marker_numbers(text):
        chunk = passages.get(n)
        if chunk is None:
            cites.append(Citation(marker=n, valid=False))
        else:
            cites.append(Citation(marker=n, chunk_id=chunk.id, doc_id=chunk.doc_id, valid=True))
    return cites


def invalid_markers(citations: Sequence[Citation]) -> list[int]:
    return [c.marker for c in citations if not c.valid]


def format_citations(citations: Sequence[Citation], titles: Mapping[int, str] | None = None) -> list[str]:
    """One line per citation, for printing: `[2] doc-17 (Title)` or `[9] (no such passage)`."""
    lines = []
    for c in citations:
        if not c.valid:
            lines.append(f"[{c.marker}] (no such passage was provided)")
            continue
        title = (titles or {}).get(c.marker, "")
        lines.append(f"[{c.marker}] {c.doc_id}" + (f" ({title})" if title else "") + f"  chunk {c.chunk_id}")
    return lines
