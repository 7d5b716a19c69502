"""`recursive`: cut at the coarsest boundary that makes the pieces fit, and pack them up to `size` tokens.

A document is first cut into sections at its Markdown (ATX `#`, never inside a fenced code block) and HTML (`<h1>`
to `<h6>`) headings: hard boundaries, and each chunk carries the heading path it sits under. A section longer than
`size` tokens is cut at paragraphs (blank lines), a paragraph still too long at lines, then sentences (English and
Chinese ends, ragopt.text), clauses (`, ; :` and Chinese `，、；：`), words (whitespace, each Han character one) and,
last, token windows. The pieces of one level are packed greedily, in order, into chunks of at most `size` tokens
(a too-long piece's own chunks take part in that packing), neighbouring chunks sharing whole trailing pieces of up to
`overlap` tokens. Every cut falls on a boundary of the text itself: a chunk is a slice, never text rejoined.
"""

from __future__ import annotations

import re
from typing import Callable

from ragopt.chunking.spec import ChunkerSpec, CutContext, Piece, each_text, token_counts
from ragopt.chunking.tokenizer import ChunkTokenizer
from ragopt.chunking.tokens import pack
from ragopt.documents.sections import HeadingPath
from ragopt.text import clause_spans, sentence_spans, word_spans

VERSION = 1
Span = tuple[int, int]
Sized = tuple[int, int, int]  # a span and its tokens

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?(?:^ {0,3}\1[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_HTML_HEADING = re.compile(r"<h([1-6])\b[^>]*>(.*?)</h\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_PARAGRAPH = re.compile(r"\n[^\S\n]*\n\s*")
_LINE = re.compile(r"\s*\n\s*")


def headings(text: str) -> list[tuple[int, int, str]]:
    """(offset, level, title) of the text's Markdown and HTML headings, in order."""
    fences = [m.span() for m in _FENCE.finditer(text)] if "```" in text or "~~~" in text else []
    found = [(m.start(), len(m.group(1)), m.group(2).strip()) for m in _ATX.finditer(text)
             if not any(s <= m.start() < e for s, e in fences)]
    if "<h" in text or "<H" in text:
        found += [(m.start(), int(m.group(1)), " ".join(_TAG.sub(" ", m.group(2)).split())) for m in _HTML_HEADING.finditer(text)]
    return sorted(found)


def sections(text: str) -> list[Piece]:
    """The text cut at its headings: each section from its heading to the next, with its heading path."""
    found = headings(text)
    out = [Piece(0, found[0][0] if found else len(text))]
    path = HeadingPath()
    for i, (start, level, title) in enumerate(found):
        stop = found[i + 1][0] if i + 1 < len(found) else len(text)
        out.append(Piece(start, stop, tuple(path.enter(level, title))))
    return out


def _split(pattern: re.Pattern[str]) -> Callable[[str, int, int], list[Span]]:
    def split(text: str, lo: int, hi: int) -> list[Span]:
        out, start = [], lo
        for m in pattern.finditer(text, lo, hi):
            out.append((start, m.start()))
            start = m.end()
        out.append((start, hi))
        return [t for t in map(lambda span: trim(text, *span), out) if t[1] > t[0]]

    return split


def trim(text: str, lo: int, hi: int) -> Span:
    while lo < hi and text[lo].isspace():
        lo += 1
    while hi > lo and text[hi - 1].isspace():
        hi -= 1
    return lo, hi


def _shifted(spans: Callable[[str], list[Span]]) -> Callable[[str, int, int], list[Span]]:
    return lambda text, lo, hi: [(lo + s, lo + e) for s, e in spans(text[lo:hi])]


# coarsest first: what a piece too long for a chunk is cut at, one level after another
LEVELS = (_split(_PARAGRAPH), _split(_LINE), _shifted(sentence_spans), _shifted(clause_spans), _shifted(word_spans))


class Cutter:
    """One text's cuts by these rules, at most `size` tokens a chunk, `overlap` shared."""

    def __init__(self, text: str, size: int, overlap: int, tokenizer: ChunkTokenizer):
        self.text = text
        self.tokens = token_counts(text, tokenizer)
        self.size, self.overlap = size, overlap

    def cut(self, lo: int, hi: int, level: int = 0) -> list[Sized]:
        """[lo, hi) (whitespace trimmed) as chunks of at most `size` tokens, cut at level `level` or finer, each
        with its tokens (a chunk of pieces: theirs summed, as only whitespace lies between them)."""
        n = self.tokens.count(lo, hi)
        if n <= self.size:
            return [(lo, hi, n)]
        if level == len(LEVELS):  # a word longer than a chunk: token windows
            return self.tokens.cut_windows(lo, hi, self.size, self.size - self.overlap)
        pieces = LEVELS[level](self.text, lo, hi)
        if len(pieces) == 1:
            return self.cut(*pieces[0], level + 1)
        units = [unit for s, e in pieces for unit in self.cut(s, e, level + 1)]
        runs = pack([n for _, _, n in units], self.size, self.overlap)
        return [(units[i][0], units[j - 1][1], sum(n for _, _, n in units[i:j])) for i, j in runs]


def cut(text: str, ctx: CutContext) -> list[Piece]:
    cutter = Cutter(text, ctx.config.size, ctx.config.overlap, ctx.tokenizer)
    out = []
    for section in sections(text):
        lo, hi = trim(text, section.start, section.end)
        if lo == hi:
            continue
        if cutter.tokens.count(lo, hi) == 0:  # text the tokenizer drops: kept whole
            out.append(Piece(lo, hi, section.headings))
            continue
        out += [Piece(s, e, section.headings) for s, e, _ in cutter.cut(lo, hi)]
    return out


SPEC = ChunkerSpec("recursive", each_text(cut), version=VERSION)
