"""Searching for the largest prompt that fits a token budget: a guided search over one dimension, and token
counts of prompt lines (the search's estimates) remembered by text."""

from __future__ import annotations

from array import array
from typing import Any, Callable, Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def prefix_tokens(text: str, tokens: Sequence[int], end_char: int, tokenize: Callable[[str], list[int]]) -> int:
    """How many of `tokens` (the whole prompt) encode exactly `text[:end_char]`; merges across the cut shorten it."""
    if end_char <= 0:
        return 0
    return common_prefix(tokenize(text[:end_char]), tokens)


def largest(lo: int, hi: int, ok: Callable[[int], bool], start: int | None = None) -> int | None:
    """Largest x in [lo, hi] with ok(x), for ok true up to some x and false beyond; None if ok(lo) fails.

    A check tokenizes a prompt of about x parts, so the search goes out from `start` (a guess; lo without one)
    in doubling steps, down or up, before it bisects: the checks stay near the answer. Plain bisection over
    the 100 passages an evaluation retrieves, when a few of them fit, tokenized the largest prompts first."""
    if not ok(lo):
        return None
    x = lo if start is None else min(max(start, lo), hi)
    step = 1
    if x > lo and not ok(x):  # the answer is below the guess
        hi = x - 1
        while True:
            probe = max(x - step, lo)
            if probe == lo or ok(probe):
                lo = probe
                break
            hi, step = probe - 1, step * 2
    else:
        lo = x
        while lo < hi:
            probe = min(lo + step, hi)
            if not ok(probe):
                hi = probe - 1
                break
            lo, step = probe, step * 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


class LineCounts:
    """A renderer's token counts of prompt lines, each distinct line tokenized once (through the renderer's own
    `count`, remembered across prompts, when it has one). A prompt's estimate is the sum over its lines: exact
    when the tokenizer splits on whitespace, else close (merges across a line break differ)."""

    def __init__(self, renderer: Any):
        self.renderer = renderer
        self.exact = bool(getattr(renderer, "splits_on_whitespace", False))
        self._counts: dict[str, int] = {}
        count = getattr(renderer, "count", None)
        self.count: Callable[[str], int] = count if callable(count) else self._tokenized

    def _tokenized(self, line: str) -> int:
        n = self._counts.get(line)
        if n is None:
            n = self._counts[line] = len(self.renderer.tokenize(line))
        return n

    def estimate(self, text: str) -> int:
        return sum(map(self.count, text.splitlines(keepends=True)))

    def tokens(self, text: str) -> Sequence[int]:
        """The tokens of a whole prompt: its lines' remembered ids joined when the tokenizer splits on whitespace
        (the same ids, without tokenizing the prompt again, in one array: no int object per token), else the
        tokenizer's."""
        ids = getattr(self.renderer, "ids", None)
        if self.exact and ids is not None:
            joined = array("I")
            for line in text.splitlines(keepends=True):
                joined.extend(ids(line))
            return joined
        return self.renderer.tokenize(text)
