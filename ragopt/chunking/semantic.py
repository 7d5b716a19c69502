"""`semantic`: cut where neighbouring sentences' embeddings part most.

Each section (cut at headings, as `recursive` does) is split into sentences (ragopt.text: English and Chinese
ends, line breaks); every sentence is embedded by the plan's embedder, through its cache like every other text.
A boundary between two sentences becomes a cut where their cosine distance is above the `percentile`-th percentile
of the document's distances and above `threshold` (two knobs, each with one meaning: a share and a distance). A part
shorter than `min_size` tokens (at most half of `size`) joins the part after it, or the last part the one before,
where the two fit in `size`; a part longer than `size` is cut by the recursive chunker's rules.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ragopt.chunking.recursive import Cutter, sections, trim
from ragopt.chunking.spec import ChunkerSpec, CutContext, Piece
from ragopt.text import sentence_spans

VERSION = 1


def _sentences(text: str) -> list[tuple[Piece, list[tuple[int, int]]]]:
    """Each non-blank section with its sentence spans (offsets into `text`)."""
    out = []
    for section in sections(text):
        lo, hi = trim(text, section.start, section.end)
        if hi > lo:
            spans = [(lo + s, lo + e) for s, e in sentence_spans(text[lo:hi])]
            out.append((Piece(lo, hi, section.headings), spans))
    return out


def _groups(distances: np.ndarray, percentile: float, threshold: float) -> list[int]:
    """The sentence indexes where a new part starts (after the first): the boundaries whose distance is above both
    the percentile of `distances` and the threshold."""
    if distances.size == 0:
        return []
    floor = max(float(np.percentile(distances, percentile)), threshold)
    return [i + 1 for i, d in enumerate(distances) if d > floor]


def _merge_small(parts: list[tuple[int, int]], count, min_size: int, size: int) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Parts (char spans) shorter than `min_size` tokens joined to the next part (the last to the previous) where the
    two fit in `size` tokens."""
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(parts):
        start, end = parts[i]
        while count(start, end) < min_size and i + 1 < len(parts) and count(start, parts[i + 1][1]) <= size:
            i += 1
            end = parts[i][1]
        if out and count(start, end) < min_size and count(out[-1][0], end) <= size:
            start = out.pop()[0]
        out.append((start, end))
        i += 1
    return out


def cut_all(texts: Sequence[str], ctx: CutContext) -> list[list[Piece]]:
    assert ctx.embedder is not None  # Chunker refuses a semantic chunker without one
    config = ctx.config
    found = [_sentences(text) for text in texts]
    unique = sorted({text[s:e] for text, sections_ in zip(texts, found) for _, spans in sections_ for s, e in spans})
    vectors = ctx.embedder.encode(unique).vectors if unique else np.zeros((0, 1), dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    row = dict(zip(unique, vectors / np.where(norms > 0, norms, 1)))
    out = []
    for text, sections_ in zip(texts, found):
        cutter = Cutter(text, config.size, 0, ctx.tokenizer)
        pieces: list[Piece] = []
        for section, spans in sections_:
            if not spans:
                continue
            embedded = np.stack([row[text[s:e]] for s, e in spans])
            distances = 1.0 - np.einsum("ij,ij->i", embedded[:-1], embedded[1:])
            starts = [0, *_groups(distances, config.percentile, config.threshold), len(spans)]
            parts = [(spans[a][0], spans[b - 1][1]) for a, b in zip(starts, starts[1:])]
            parts = _merge_small(parts, cutter.tokens.count, min(config.min_size, config.size // 2), config.size)
            for s, e in parts:
                pieces += [Piece(a, b, section.headings) for a, b, _ in cutter.cut(s, e)]
        out.append(pieces)
    return out


SPEC = ChunkerSpec("semantic", cut_all, version=VERSION, needs_embedder=True)
