"""`tokens`: token windows that respect sentence boundaries where they can.

Sentences (English or Chinese, `ragopt.text.sentence_spans`) are packed greedily into chunks of at most `size`
tokens; a sentence longer than `size` is cut at token boundaries, moved where needed so that no cut falls inside a
character (a letter and its combining marks, an emoji sequence: byte-level tokenizers split those). Neighbouring
chunks share whole trailing sentences (or, inside a long sentence, tokens) adding up to at most `overlap` tokens.
"""

from __future__ import annotations

from ragopt.chunking.spec import ChunkerSpec, CutContext, Piece, TokenIndex, each_text
from ragopt.text import sentence_spans

# Part of the tokens and whole chunkers' fingerprints: bump it when their cutting rules (here or in ragopt.text)
# change, so that indexes chunked by the old rules are never reused as if they were current. 3: Chinese sentence
# ends, Han characters counted one by one by the whitespace tokenizer, cuts never inside a character.
CHUNKING_VERSION = 3


def cut(text: str, ctx: CutContext) -> list[Piece]:
    tokens = TokenIndex(text, ctx.tokenizer)
    if not tokens.tokens:
        return [Piece(0, len(text))] if text.strip() else []
    size, overlap = ctx.config.size, ctx.config.overlap
    # Units are (first token, end token) ranges: sentences, or token windows of long sentences.
    units: list[tuple[int, int]] = []
    for s, e in sentence_spans(text) if ctx.config.respect_sentences else [(0, len(text))]:
        first, last = tokens.first(s), tokens.first(e)
        if last - first <= size:
            if last > first:
                units.append((first, last))
            continue
        units += tokens.windows(s, e, size, size - overlap)
    return [Piece(*tokens.span(units[i][0], units[j - 1][1])) for i, j in pack([b - a for a, b in units], size, overlap)]


def pack(lengths: list[int], size: int, overlap: int) -> list[tuple[int, int]]:
    """Units of these lengths packed greedily, in order, into runs [i, j) of at most `size` (a longer unit alone);
    each run after the first starts with whole trailing units of the one before adding up to at most `overlap`,
    always moving forward."""
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(lengths):
        j, n = i, 0
        while j < len(lengths) and n + lengths[j] <= size:
            n += lengths[j]
            j += 1
        j = max(j, i + 1)
        runs.append((i, j))
        if j >= len(lengths):
            break
        # Step back over whole trailing units that fit in the overlap, always moving forward.
        k, shared = j, 0
        while k - 1 > i and shared + lengths[k - 1] <= overlap:
            shared += lengths[k - 1]
            k -= 1
        i = k
    return runs


SPEC = ChunkerSpec("tokens", each_text(cut), version=CHUNKING_VERSION)
