"""Text helpers shared by stages: sentence spans and word tokens, both with char offsets."""

from __future__ import annotations

import itertools
import re
import unicodedata
from functools import cache

# A sentence ends at . ! or ? (possibly followed by a closing quote or bracket) followed by space and an
# upper-case letter, digit or opening bracket/quote, or at a line break: field dictionaries and runbooks put
# one fact or step per line. Good enough for prose too.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[A-Z0-9\"'(\[])|\s*\n\s*")
_NON_SPACE = re.compile(r"\S+")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) char spans of the sentences in `text`, whitespace trimmed, in order, never empty."""
    spans = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for s, e in spans:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            out.append((s, e))
    return out


def sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in sentence_spans(text)]


def word_spans(text: str) -> list[tuple[int, int]]:
    """Whitespace-separated tokens with their char offsets."""
    return [m.span() for m in _NON_SPACE.finditer(text)]


@cache
def _word_pattern() -> re.Pattern[str]:
    """A word: a \\w character, then \\w characters or combining marks (Unicode category M). `\\w` alone
    splits words at marks: Devanagari vowel signs, decomposed accents, the dot casefold leaves on İ."""
    marks: list[str] = []
    start = prev = -2
    for cp in itertools.chain(range(0x300, 0x20000), range(0xE0100, 0xE01F0)):  # every mark lies here
        if unicodedata.category(chr(cp))[0] != "M":
            continue
        if cp != prev + 1:
            if start >= 0:
                marks.append(f"{chr(start)}-{chr(prev)}")
            start = cp
        prev = cp
    marks.append(f"{chr(start)}-{chr(prev)}")
    return re.compile(rf"\w[\w{''.join(marks)}]*")


def words(text: str) -> list[str]:
    """Unicode-aware lower-cased word tokens (casefold handles ß, Turkish dotless i and the like)."""
    return _word_pattern().findall(text.casefold())
