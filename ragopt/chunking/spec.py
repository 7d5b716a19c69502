"""What a chunker module declares: a `ChunkerSpec` named `SPEC` beside its cutting rules, as a stage module declares
a StageSpec. The registry (ragopt.chunking.registry) collects them; `ChunkerConfig.chunker` names one.

A chunker cuts texts into `Piece`s: (start, end) char offsets into the text it was given, in order, each with the
heading path it sits under inside that text. ragopt.chunking.chunker turns them into Chunks (ids, headers,
metadata) and checks that each is a slice of its document.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

from ragopt.chunking.tokenizer import ChunkTokenizer
from ragopt.config import ChunkerConfig
from ragopt.text import char_boundary, word_spans

if TYPE_CHECKING:
    from ragopt.backends.embeddings import Embedder


class Piece(NamedTuple):
    start: int
    end: int
    headings: tuple[str, ...] = ()  # outermost first: the headings in the text above this piece


@dataclass
class CutContext:
    """What a chunker may use: its config, the tokenizer sizes are counted with, and the embedder (semantic)."""

    config: ChunkerConfig
    tokenizer: ChunkTokenizer
    embedder: "Embedder | None" = None


Cut = Callable[[Sequence[str], CutContext], list[list[Piece]]]


@dataclass(frozen=True)
class ChunkerSpec:
    name: str  # ChunkerConfig.chunker
    cut: Cut  # texts -> their pieces (all texts at once: semantic embeds every sentence in one call)
    version: int  # part of the fingerprint: bump it when the cutting rules change, so old indexes are not reused
    counts_tokens: bool = True  # whether sizes are counted (whole: no), so the tokenizer is part of the fingerprint
    needs_embedder: bool = False  # semantic: sentence embeddings decide the cuts


def each_text(cut: Callable[[str, CutContext], list[Piece]]) -> Cut:
    """A Cut of a chunker that cuts each text on its own."""
    return lambda texts, ctx: [cut(text, ctx) for text in texts]


class TokenIndex:
    """A text's tokens, counted over any char span in O(log n): a token belongs to the span its start lies in."""

    def __init__(self, text: str, tokenizer: ChunkTokenizer):
        self.text = text
        self.tokens = tokenizer.offsets(text)
        self.starts = [s for s, _ in self.tokens]

    def count(self, start: int, end: int) -> int:
        return bisect.bisect_left(self.starts, end) - bisect.bisect_left(self.starts, start)

    def first(self, start: int) -> int:
        """The index of the first token at or after `start`."""
        return bisect.bisect_left(self.starts, start)

    def span(self, first: int, end: int) -> tuple[int, int]:
        """The chars of tokens [first, end), widened to whole characters (a byte-level BPE splits a letter from its
        combining mark, an emoji sequence into several tokens)."""
        return (char_boundary(self.text, self.tokens[first][0], forward=False),
                char_boundary(self.text, self.tokens[end - 1][1], forward=True))

    def cut_windows(self, start: int, end: int, size: int, step: int) -> list[tuple[int, int, int]]:
        """[start, end) as windows of `size` tokens, each `step` tokens after the last: (start, end, tokens)."""
        return [(*self.span(a, b), b - a) for a, b in self.windows(start, end, size, step)]

    def windows(self, start: int, end: int, size: int, step: int) -> list[tuple[int, int]]:
        """The tokens of [start, end) as windows of `size` tokens, each `step` tokens after the last (token ranges)."""
        first, last = self.first(start), self.first(end)
        out = []
        for w in range(first, last, step):
            out.append((w, min(w + size, last)))
            if w + size >= last:
                break
        return out


class WordCounts:
    """A text's tokens counted word by word (ragopt.text.word_spans: whitespace-separated, each Han character and
    Chinese mark alone), each distinct word tokenized once: for a tokenizer no token of which spans whitespace or
    joins Han characters (WordPiece), a span between words holds exactly its words' tokens. Counts like TokenIndex,
    several times faster on long texts (docs/chunking.md); only a word longer than a chunk is tokenized in place."""

    def __init__(self, text: str, tokenizer: ChunkTokenizer):
        self.text = text
        self.tokenizer = tokenizer
        words = word_spans(text)
        self.starts = [s for s, _ in words]
        counts = tokenizer.counts([text[s:e] for s, e in words])
        self.prefix = list(itertools.accumulate(counts, initial=0))

    def count(self, start: int, end: int) -> int:
        return self.prefix[bisect.bisect_left(self.starts, end)] - self.prefix[bisect.bisect_left(self.starts, start)]

    def cut_windows(self, start: int, end: int, size: int, step: int) -> list[tuple[int, int, int]]:
        inside = TokenIndex(self.text[start:end], self.tokenizer)
        return [(start + a, start + b, n) for a, b, n in inside.cut_windows(0, end - start, size, step)]


def token_counts(text: str, tokenizer: ChunkTokenizer) -> "TokenIndex | WordCounts":
    """The fastest exact token counter of `text` for this tokenizer."""
    return WordCounts(text, tokenizer) if tokenizer.splits_on_whitespace else TokenIndex(text, tokenizer)
