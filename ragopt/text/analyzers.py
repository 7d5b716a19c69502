"""Analyzers: text to search terms, one per language family, shared by BM25 and every stage that matches
words (compression's BM25 scorer, citation attribution, the extractive generator, the glossary rewrite).

- "english": Unicode word runs, casefolded, English stopwords dropped, Snowball-stemmed (ragopt's BM25 as
  it always was);
- "chinese": runs of Han characters segmented by jieba (search mode), Chinese stopwords dropped, punctuation
  never a term; everything else (Latin words, digits) analyzed exactly as "english", so a mixed corpus keeps
  its English stemming and Latin words inside Chinese text still match;
- "whitespace": Unicode word runs, casefolded, nothing dropped or stemmed (languages that space their words).

"auto" picks one from the corpus (`detect_analyzer`): "chinese" when Han characters make at least
`HAN_SHARE_FOR_CHINESE` of its letters, else "english". The stopwords and stemmer settings apply to the
words outside Han runs; with the chinese analyzer, stopwords "none" keeps Chinese function words too.
"""

from __future__ import annotations

import re
from functools import cache, cached_property
from typing import Iterable, Literal, Protocol, Sequence

from ragopt.text import chinese
from ragopt.text.script import HAN_CLASS, HAN_RUN, ScriptShare
from ragopt.text.words import word_matches, words

AnalyzerName = Literal["english", "chinese", "whitespace"]
ANALYZERS: tuple[str, ...] = ("english", "chinese", "whitespace")
# A Chinese paragraph is mostly Han (CMRC: 78% of characters); a corpus with a few Chinese documents among
# English ones still needs them segmented, and the chinese analyzer treats the English words exactly as
# "english" does, so a low share is enough.
HAN_SHARE_FOR_CHINESE = 0.02
_RUNS = re.compile(f"[{HAN_CLASS}]+|[^{HAN_CLASS}]+")


class Analyzer(Protocol):
    name: str

    @property
    def fingerprint(self) -> str: ...

    def __call__(self, text: str) -> list[str]: ...

    def word_spans(self, text: str) -> list[tuple[int, int]]: ...


class WhitespaceAnalyzer:
    name = "whitespace"
    fingerprint = "whitespace"

    def __call__(self, text: str) -> list[str]:
        return words(text)

    def word_spans(self, text: str) -> list[tuple[int, int]]:
        """Where the words lie in `text` (before stopwords or stemming): the units a phrase must align with."""
        return word_matches(text)


class EnglishAnalyzer(WhitespaceAnalyzer):
    name = "english"

    def __init__(self, stopwords: str = "en", stemmer: str = "english"):
        self.stopwords, self.stemmer = stopwords, stemmer

    @property
    def fingerprint(self) -> str:
        return f"{self.name}:{self.stopwords}:{self.stemmer}"

    @cached_property
    def _stopwords(self) -> frozenset[str]:
        if self.stopwords == "none":
            return frozenset()
        from bm25s.stopwords import STOPWORDS_EN

        return frozenset(STOPWORDS_EN)

    @cached_property
    def _stem(self):  # type: ignore[no-untyped-def]
        if self.stemmer == "none":
            return None
        import Stemmer

        return Stemmer.Stemmer(self.stemmer).stemWords

    def __call__(self, text: str) -> list[str]:
        tokens = [t for t in words(text) if t not in self._stopwords]
        return self._stem(tokens) if self._stem else tokens


class ChineseAnalyzer(EnglishAnalyzer):
    name = "chinese"

    @property
    def fingerprint(self) -> str:
        return f"{super().fingerprint}:{chinese.SEGMENTER}"

    def _pieces(self, text: str) -> Iterable[tuple[bool, int, int]]:
        """(is a Han run, start, end) covering `text` in order."""
        at = 0
        for m in HAN_RUN.finditer(text):
            if m.start() > at:
                yield False, at, m.start()
            yield True, m.start(), m.end()
            at = m.end()
        if at < len(text):
            yield False, at, len(text)

    def __call__(self, text: str) -> list[str]:
        keep_all = self.stopwords == "none"
        out: list[str] = []
        latin: list[int] = []  # positions in `out` of the words outside Han runs, stemmed in one call below
        for han, start, end in self._pieces(text):
            if han:
                out += [w for w, _, _ in chinese.segment(text[start:end]) if keep_all or w not in chinese.STOPWORDS_ZH]
            else:
                found = [w for w in words(text[start:end]) if w not in self._stopwords]
                latin += range(len(out), len(out) + len(found))
                out += found
        if self._stem and latin:
            for i, stem in zip(latin, self._stem([out[i] for i in latin])):
                out[i] = stem
        return out

    def word_spans(self, text: str) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for han, start, end in self._pieces(text):
            found = chinese.segment(text[start:end]) if han else None
            spans += [(start + s, start + e) for _, s, e in found] if found is not None else \
                [(start + s, start + e) for s, e in word_matches(text[start:end])]
        return spans


@cache
def make_analyzer(name: str, stopwords: str = "en", stemmer: str = "english") -> Analyzer:
    if name == "whitespace":
        return WhitespaceAnalyzer()
    if name == "english":
        return EnglishAnalyzer(stopwords, stemmer)
    if name == "chinese":
        return ChineseAnalyzer(stopwords, stemmer)
    raise ValueError(f"unknown analyzer {name!r}; known: {', '.join(ANALYZERS)}")


def detect_analyzer(corpus: Iterable[str] | ScriptShare) -> AnalyzerName:
    """The analyzer a corpus (its texts, or their script shares) gets when none is set, from its share of Han
    characters."""
    share = corpus if isinstance(corpus, ScriptShare) else ScriptShare(corpus)
    return "chinese" if share.han_share >= HAN_SHARE_FOR_CHINESE else "english"


def analyzer_for(texts: Iterable[str]) -> Analyzer:
    """The default analyzer for these texts (a stage given no analyzer: the passages of one request)."""
    return make_analyzer(detect_analyzer(texts))


def count_words(text: str) -> int:
    """How many words a reader would count: Han runs cut into words (accurate mode, not one word per run nor
    one per character), other runs by Unicode word matches; punctuation is no word."""
    n = 0
    for m in _RUNS.finditer(text):
        run = m.group()
        n += sum(1 for w in chinese.cut(run) if words(w)) if HAN_RUN.match(run) else len(word_matches(run))
    return n


def plain_terms(text: str) -> list[str]:
    """Every word of `text` as a reader finds it: casefolded, nothing dropped or stemmed, Han runs cut as the
    chinese analyzer cuts them (search mode, so a dictionary word inside a longer one is a word too)."""
    return make_analyzer("chinese", "none", "none")(text)


def holds_phrase(terms: Sequence[str], phrase: str) -> bool:
    """Whether `phrase` (a word or several) is whole words of `terms` (from `plain_terms`): its terms side by side
    in order, or the phrase itself one term. "now" is not in "known", nor "last" in "lasting"."""
    want = _phrase_terms(phrase)
    if not want:
        return False
    return phrase.casefold() in terms or any(tuple(terms[i:i + len(want)]) == want for i in range(len(terms) - len(want) + 1))


@cache
def _phrase_terms(phrase: str) -> tuple[str, ...]:
    return tuple(plain_terms(phrase))
