"""Degenerate-repetition stop: a small model decoding greedily can fall into a loop ("The unit is 100 mmol/L.
The unit is 180 mmol/L. The unit is 100 mmol/L. ...") that only max_tokens ends, holding the model for
nothing. `RepetitionStop` says stop once the answer's latest `ngram` tokens have occurred `repeats` times in
it (overlapping occurrences count, so a loop of any period is caught after about `repeats` periods).
"""

from __future__ import annotations

from collections import Counter


class RepetitionStop:
    def __init__(self, ngram: int, repeats: int):
        if ngram < 1 or repeats < 2:
            raise ValueError(f"need ngram >= 1 and repeats >= 2, got {ngram}, {repeats}")
        self.ngram = ngram
        self.repeats = repeats
        self.tokens: list[int] = []
        self._seen: Counter[tuple[int, ...]] = Counter()

    def add(self, token: int) -> bool:
        """Record the answer's next token; True when the n-gram it ends has now occurred `repeats` times."""
        self.tokens.append(token)
        if len(self.tokens) < self.ngram:
            return False
        gram = tuple(self.tokens[-self.ngram :])
        self._seen[gram] += 1
        return self._seen[gram] >= self.repeats
