"""Word tokens with char offsets: Unicode word runs (casefolded), and whitespace tokens for counting."""

from __future__ import annotations

import itertools
import re
import unicodedata
from functools import cache

from ragopt.text.script import CJK_PUNCT_CLASS, HAN_CLASS

_HAN = re.compile(f"[{HAN_CLASS}]")

# A whitespace token, except that each Han character and each Chinese punctuation mark counts as a token of its
# own: Chinese puts no spaces between words, and a whole sentence counted as one token would never fit a chunk.
_TOKEN = re.compile(rf"[{HAN_CLASS}{CJK_PUNCT_CLASS}]|[^\s{HAN_CLASS}{CJK_PUNCT_CLASS}]+")


def word_spans(text: str) -> list[tuple[int, int]]:
    """Whitespace-separated tokens (each Han character or Chinese punctuation mark one token) with their char offsets."""
    return [m.span() for m in _TOKEN.finditer(text)]


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


def word_matches(text: str) -> list[tuple[int, int]]:
    """The char spans of `words(text)` in `text` itself (casefold keeps offsets for all but a few letters,
    so the spans are found on the original text)."""
    return [m.span() for m in _word_pattern().finditer(text)]



_HAN_OR_REST = re.compile(rf"[{HAN_CLASS}]|[^{HAN_CLASS}]+")


def word_units(text: str) -> list[str]:
    """`words`, except that each Han character is a unit of its own: what measures that need no dictionary
    (near-duplicate shingles, length limits) count in Chinese text."""
    out: list[str] = []
    for w in words(text):
        out += _HAN_OR_REST.findall(w) if _HAN.search(w) else [w]
    return out


def _joins_previous(text: str, i: int) -> bool:
    """Whether text[i] continues the character before it: a combining mark, a variation selector, a zero-width
    joiner or what follows one (an emoji sequence)."""
    ch = text[i]
    return unicodedata.category(ch)[0] == "M" or ch in "\u200d\ufe0e\ufe0f" or text[i - 1] == "\u200d"


def char_boundary(text: str, i: int, *, forward: bool) -> int:
    """The nearest position at or around `i` that does not fall inside a user-perceived character (a letter
    and its marks, an emoji sequence), moving forward or back."""
    while 0 < i < len(text) and _joins_previous(text, i):
        i += 1 if forward else -1
    return i
