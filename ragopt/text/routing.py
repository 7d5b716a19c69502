"""The routing rule, once: which questions a small backend can answer and which need the default one. Serve's
two-model routing (ragopt.serve.service) and the generate stage's routed plans (a sweep knob) both ask it."""

from __future__ import annotations

import re
from dataclasses import dataclass

SMALL, DEFAULT = "small", "default"

_COMPLEX = re.compile(r"\b(why|how|compare|explain|difference|versus|vs|analy[sz]e|evaluate)\b", re.IGNORECASE)
# The same asks in Chinese (no spaces, so no word boundaries: a substring is the word).
_COMPLEX_ZH = ("为什么", "为何", "如何", "怎么", "怎样", "比较", "解释", "区别", "差异", "分析", "评估", "原因")


def asks_for_reasoning(question: str) -> bool:
    """Whether the question asks why, how, to compare or explain (or 为什么, 如何, 比较...)."""
    return bool(_COMPLEX.search(question)) or any(w in question for w in _COMPLEX_ZH)


@dataclass(frozen=True)
class Router:
    """`route(question)` -> "small" for a question of at most `small_max_words` words (counted as a reader
    counts them: a Chinese question is cut into words, not one "word" per space-free run) that does not ask for
    reasoning, else "default". `small_max_words=0` routes everything to the default backend."""

    small_max_words: int = 0

    def route(self, question: str) -> str:
        from ragopt.text.analyzers import count_words

        if self.small_max_words <= 0 or asks_for_reasoning(question):
            return DEFAULT
        return SMALL if count_words(question) <= self.small_max_words else DEFAULT
