"""An extractive answer without an LLM: the sentences of the top passages that best match the question, cited.

Deterministic and fast (no model, no clock): the default when no model is available, the fallback when the
LLM generator fails or runs out of time (`Step(LlamaGenerator(...), fallback=ExtractiveGenerator())`), and
a baseline in evaluation. Passages are numbered exactly as the LLM prompt numbers them (rank order), so
`[n]` means the same passage for both generators.

Terms are the BM25 analyzer's (`ragopt.text.analyzers`: stemmed English, segmented Chinese), the one the plan's
index uses, or the one the passages' script calls for when no analyzer is given.

Sentence score: the summed IDF (over the candidate sentences) of the distinct question terms the sentence
contains, plus half that for question terms found only in its passage's title (a sentence needs at least one
match of its own), divided by 1 + 0.15 x (passage number - 1) so better-ranked passages win ties.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import Field

from ragopt.config import StrictModel
from ragopt.pipeline import RequestState
from ragopt.stages.citations import parse_citations
from ragopt.stages.prompt import Passage, number_passages
from ragopt.text import Analyzer, analyzer_for, sentences, word_spans
from ragopt.types import Answer

NO_CONTEXT_TEXT = "No passages were retrieved, so there is nothing to answer from."


class ExtractiveConfig(StrictModel):
    max_passages: int = Field(5, gt=0, description="top passages to draw sentences from")
    max_sentences: int = Field(2, gt=0)
    max_chars: int = Field(600, gt=0, description="answer length cap")
    min_words: int = Field(4, ge=1, description="shorter sentences (headings, fragments) are skipped when others exist; "
                           "words as whitespace separates them, each Han character counted as one")


class ExtractiveGenerator:
    name = "extractive"
    reads = ("query", "hits")
    writes = ("answer",)

    def __init__(self, config: ExtractiveConfig | None = None, name: str = "extractive", analyzer: Analyzer | None = None):
        self.config = config or ExtractiveConfig()
        self.name = name
        self.analyzer = analyzer

    def run(self, state: RequestState) -> RequestState:
        cfg = self.config
        passages = number_passages(state.hits, limit=cfg.max_passages, max_chars=None)
        state.usage.attrs["generator"] = "extractive"
        if not passages:
            state.answer = Answer(text=NO_CONTEXT_TEXT, finish_reason="no_context", generator="extractive")
            if state.on_token is not None:
                state.on_token(NO_CONTEXT_TEXT)
            return state

        terms = self.analyzer or analyzer_for(p.text for p in passages)
        candidates, title_terms = _candidates(passages, terms)
        q_terms = set(terms(state.query.text))
        score = _sentence_score(candidates, title_terms, q_terms)
        long_enough = [c for c in candidates if len(word_spans(c[2])) >= cfg.min_words] or candidates
        ranked = sorted(long_enough, key=lambda c: (-score(c), c[0], c[1]))
        chosen = [c for c in ranked if score(c) > 0][: cfg.max_sentences]
        overlap = bool(chosen)
        if not chosen:  # nothing matches: the retriever's best guess, its first sentence
            chosen = [min(long_enough, key=lambda c: (c[0], c[1]))]

        pieces = _cited_pieces(chosen, cfg.max_chars, state.on_token)
        text = " ".join(pieces)
        numbered = {p.number: p.hit.chunk for p in passages}
        state.answer = Answer(text=text, citations=parse_citations(text, numbered), generator="extractive")
        state.usage.attrs.update(
            {
                "candidate_sentences": len(candidates),
                "selected_sentences": len(pieces),
                "question_overlap": overlap,
                "passages_considered": [p.chunk_id for p in passages],
            }
        )
        return state


_Candidate = tuple[int, int, str, set[str]]  # (passage number, sentence index, text, terms)


def _candidates(passages: list[Passage], terms: Analyzer) -> tuple[list[_Candidate], dict[int, set[str]]]:
    """Every sentence of the passages with its terms, and each passage's title terms by passage number."""
    candidates: list[_Candidate] = []
    title_terms: dict[int, set[str]] = {}
    for p in passages:
        title_terms[p.number] = set(terms(p.hit.chunk.title))
        for i, sentence in enumerate(sentences(p.text)):
            candidates.append((p.number, i, sentence, set(terms(sentence))))
    return candidates, title_terms


def _sentence_score(candidates: list[_Candidate], title_terms: dict[int, set[str]],
                    q_terms: set[str]) -> Callable[[_Candidate], float]:
    """The sentence score of the module docstring, its IDF counted over the candidate sentences."""
    df: dict[str, int] = {}
    for *_, ts in candidates:
        for t in ts & q_terms:
            df[t] = df.get(t, 0) + 1
    n = len(candidates)

    def idf(t: str) -> float:
        return math.log(1 + n / df.get(t, 1))

    def score(c: _Candidate) -> float:
        matched = c[3] & q_terms
        from_title = (title_terms[c[0]] & q_terms) - matched  # the title gives a sentence its context
        # summed in sorted order: a set's order changes with the process's hash seed, and float sums with order
        content = sum(idf(t) for t in sorted(matched)) + 0.5 * sum(idf(t) for t in sorted(from_title))
        return content / (1 + 0.15 * (c[0] - 1)) if matched else 0.0

    return score


def _cited_pieces(chosen: list[_Candidate], max_chars: int, on_token: Callable[[str], None] | None) -> list[str]:
    """Each chosen sentence with its [n], within max_chars: the one that overflows is cut at a word, and none
    is added once fewer than 40 characters are left. Each piece goes to `on_token` as it is made."""
    pieces: list[str] = []
    used = 0
    for number, _, sentence, _ in chosen:
        room = max_chars - used
        if pieces and room < 40:
            break
        if len(sentence) > room:
            sentence = sentence[: max(room - 4, 20)].rsplit(" ", 1)[0] + " ..."
        piece = f"{sentence} [{number}]"
        pieces.append(piece)
        used += len(piece) + 1
        if on_token is not None:
            on_token(piece if len(pieces) == 1 else " " + piece)
    return pieces
