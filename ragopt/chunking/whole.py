"""`whole`: one chunk per document, its whole text (empty or not)."""

from __future__ import annotations

from ragopt.chunking.spec import ChunkerSpec, CutContext, Piece, each_text
from ragopt.chunking.tokens import CHUNKING_VERSION


def cut(text: str, ctx: CutContext) -> list[Piece]:
    return [Piece(0, len(text))]


SPEC = ChunkerSpec("whole", each_text(cut), version=CHUNKING_VERSION, counts_tokens=False)
