"""Sentence spans with char offsets, for English and Chinese text alike.

A sentence ends
- at . ! or ? (possibly followed by a closing quote or bracket) followed by space and an upper-case letter,
  digit or opening bracket/quote;
- at a Chinese sentence end (。！？；, or … ! ? next to a Han character), with the closing quotes and brackets
  after it, whether or not a space follows (Chinese puts none);
- at a line break: field dictionaries and runbooks put one fact or step per line.

A clause (`clause_spans`, the level a chunker cuts a sentence too long for a chunk at) ends after a comma,
semicolon or colon followed by a space, or after a Chinese comma, enumeration comma, semicolon or colon
(，、；：), which no space follows.
"""

from __future__ import annotations

import re

from ragopt.text.script import HAN_CLASS

_CLOSERS = "”’」』）》〉】\"')\\]"
_SENTENCE_END = re.compile(
    rf"(?P<cjk>(?:[。！？；]+|(?<=[{HAN_CLASS}])…+|(?:[!?]+|…+)(?=[{_CLOSERS}]*[{HAN_CLASS}]))[{_CLOSERS}]*)\s*(?=\S)"
    r"|(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[A-Z0-9\"'(\[])"
    r"|\s*\n\s*"
)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) char spans of the sentences in `text`, whitespace trimmed, in order, never empty."""
    spans = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        end = m.end("cjk") if m.group("cjk") else m.start()  # a Chinese end mark stays in its sentence
        spans.append((start, end))
        start = m.end()
    spans.append((start, len(text)))
    return _trimmed(text, spans)


def _trimmed(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`spans` with the whitespace at their edges left out, the empty ones dropped."""
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


_CLAUSE_END = re.compile(r"(?<=[,;:])\s+|(?<=[，、；：])\s*(?=\S)")


def clause_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) char spans of the clauses in `text`, whitespace trimmed, in order, never empty; the mark that
    ends a clause stays in it."""
    spans, start = [], 0
    for m in _CLAUSE_END.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return _trimmed(text, spans)
