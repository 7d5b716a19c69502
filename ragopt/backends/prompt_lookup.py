"""Prompt-lookup drafts for speculative decoding: the tokens that followed the latest earlier occurrence of the
sequence's last n-gram (n from `max_ngram` down to `min_ngram`), searched over the prompt and the answer so far.

RAG answers copy spans of their passages, so the prompt itself is a draft model that costs a dictionary
lookup. The index is updated as tokens arrive: appending token j registers the n-grams ending at j - 1 with
continuation j, so the sequence's own suffix is never its own match.
"""

from __future__ import annotations

from collections.abc import Iterable


class PromptLookup:
    def __init__(self, tokens: Iterable[int], *, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.tokens: list[int] = []
        # n -> n-gram -> index of the token that followed its latest occurrence
        self._next: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(min_ngram, max_ngram + 1)}
        for token in tokens:
            self.append(token)

    def append(self, token: int) -> None:
        j = len(self.tokens)
        for n, table in self._next.items():
            if j >= n:
                table[tuple(self.tokens[j - n : j])] = j
        self.tokens.append(token)

    def draft(self, k: int) -> list[int]:
        """Up to k tokens that followed the longest matching suffix's latest earlier occurrence, or []."""
        if k <= 0:
            return []
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(self.tokens) < n:
                continue
            start = self._next[n].get(tuple(self.tokens[-n:]))
            if start is not None:
                return self.tokens[start : start + k]
        return []
