"""What a chunker module declares: a `ChunkerSpec` named `SPEC` beside its cutting rules, as a stage module declares
a StageSpec. The registry (ragopt.chunking.registry) collects them; `ChunkerConfig.chunker` names one.

A chunker cuts texts into `Piece`s: (start, end) char offsets into the text it was given, in order, each with the
heading path it sits under inside that text. ragopt.chunking.chunker turns them into Chunks (ids, headers,
metadata) and checks that each is a slice of its document.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

from ragopt.chunking.tokenizer import ChunkTokenizer
from ragopt.config import ChunkerConfig
from ragopt.text import char_boundary

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

    def windows(self, start: int, end: int, size: int, step: int) -> list[tuple[int, int]]:
        """The tokens of [start, end) as windows of `size` tokens, each `step` tokens after the last (token ranges)."""
        first, last = self.first(start), self.first(end)
        out = []
        for w in range(first, last, step):
            out.append((w, min(w + size, last)))
            if w + size >= last:
                break
        return out
