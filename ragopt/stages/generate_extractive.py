"""An extractive answer without an LLM: the sentences of the top passages that best answer the question, cited.

Deterministic and fast (no generation, no clock): the default when no model is available, the fallback when the
LLM generator fails or runs out of time (`Step(LlamaGenerator(...), fallback=ExtractiveGenerator())`), and
a baseline in evaluation. Passages are numbered exactly as the LLM prompt numbers them (rank order), so
`[n]` means the same passage for both generators.

A candidate sentence's score is a weighted sum of four signals, each scaled to [0, 1] over this request's
candidates (so the weights mean the same whatever the embedder or retriever):
- meaning: the cosine between the question's embedding (role "query") and the sentence's (role "passage"), by
  the plan's embedder, each vector cached by model and text like passage embeddings;
- lexical support: the summed IDF (over the candidate sentences) of the distinct question terms the sentence
  contains, plus half that for question terms found only in its passage's title. Terms are the BM25
  analyzer's (`ragopt.text.analyzers`: stemmed English, segmented Chinese), the plan's index's or the one the
  passages' script calls for;
- retrieval: its passage's reciprocal rank. Not its score: scores of different retrievers do not compare, and
  an answer is shared by every retrieval that ranked the same passages in the same order (ragopt.memo);
- title: the summed IDF of the question terms its passage's title holds, whatever the sentence says (a passage
  whose title names the question's subject is about it: on HotpotQA that title is the entity asked about).
The weights are knobs; their defaults were selected on training splits (docs/answers.md says how and on what),
and `meaning_weight = 0` is the lexical scorer without an embedder. The plan gives the generator its embedder;
one built without (`ExtractiveGenerator()` as a fallback in code) scores lexical support and rank alone.

A request's `max_tokens` and `stop` (`ragopt.types.Sampling`) hold here too: the answer ends before the first stop
string (finish_reason "stop"), or after `max_tokens` words, each Han character one (finish_reason "length": there is
no model vocabulary to count in). The answer is deterministic, so a seed, temperature 0 or top_p 1 ask nothing more;
any other sampling field it cannot honour (`check_sampling`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from pydantic import Field

from ragopt.backends.embeddings import Embedder
from ragopt.backends.exact_store import unit_vectors
from ragopt.config import StrictModel, knob
from ragopt.pipeline import RequestState
from ragopt.stages.citations import parse_citations
from ragopt.stages.prompt import Passage, number_passages
from ragopt.errors import BadRequest
from ragopt.text import Analyzer, analyzer_for, sentences, word_spans
from ragopt.types import Answer, Sampling

NO_CONTEXT_TEXT = "No passages were retrieved, so there is nothing to answer from."
# Selected on training splits (SciFact train, CMRC and HotpotQA seeded holdouts) by
# `scripts/select_answer_weights.py --meaning off` with max_sentences 1 (docs/answers.md). Meaning stays 0 by
# default: embedding every candidate sentence costs more than it won on held-out queries; a sweep can set it.
DEFAULT_WEIGHTS = {"meaning": 0.0, "lexical": 0.5, "rank": 0.25, "title": 0.25}


class ExtractiveConfig(StrictModel):
    max_passages: int = Field(5, gt=0, description="top passages to draw sentences from")
    max_sentences: int = knob(1, sweep=[1, 2], gt=0, description="sentences in the answer, each citing its passage "
                              "(1 was selected with the weights)")
    max_chars: int = Field(600, gt=0, description="answer length cap")
    min_words: int = Field(4, ge=1, description="shorter sentences (headings, fragments) are skipped when others exist; "
                           "words as whitespace separates them, each Han character counted as one")
    meaning_weight: float = knob(DEFAULT_WEIGHTS["meaning"], sweep=[0.0, 0.5, 1.0], ge=0, le=1,
                                 description="weight of the sentence's meaning against the question (embedder cosine)")
    lexical_weight: float = knob(DEFAULT_WEIGHTS["lexical"], sweep=[0.0, 0.5, 1.0], ge=0, le=1,
                                 description="weight of the question's words the sentence contains (IDF)")
    rank_weight: float = knob(DEFAULT_WEIGHTS["rank"], sweep=[0.0, 0.5, 1.0], ge=0, le=1,
                              description="weight of the sentence's passage's retrieval rank and score")
    title_weight: float = knob(DEFAULT_WEIGHTS["title"], sweep=[0.0, 0.5, 1.0], ge=0, le=1,
                               description="weight of the question's words the sentence's passage's title holds (IDF)")


class ExtractiveGenerator:
    name = "extractive"
    reads = ("query", "hits")
    writes = ("answer",)

    def __init__(self, config: ExtractiveConfig | None = None, name: str = "extractive", analyzer: Analyzer | None = None,
                 embedder: Embedder | None = None):
        self.config = config or ExtractiveConfig()
        self.name = name
        self.analyzer = analyzer
        self.embedder = embedder

    @property
    def reads_meaning(self) -> bool:
        """Meaning needs an embedder (the plan gives its own); one built without scores words and rank alone."""
        return self.embedder is not None and self.config.meaning_weight > 0

    def identity(self) -> dict[str, object]:
        """What decides the answer besides the passages: the config and, when meaning counts, the embedder."""
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}", "name": self.name,
                "config": self.config.model_dump(mode="json"),
                "embedder": self.embedder.fingerprint if self.embedder is not None and self.reads_meaning else None}

    @staticmethod
    def check_sampling(sampling: Sampling | None) -> None:
        """max_tokens and stop are honoured; a sampling field that asks for more than a deterministic answer is not."""
        refused = [name for name in (sampling.asked() if sampling else []) if name not in ("max_tokens", "stop")]
        if refused:
            raise BadRequest(refused[0], "the extractive answer is deterministic: it honours max_tokens and stop, "
                                         "not sampling", "unsupported_value")

    def run(self, state: RequestState) -> RequestState:
        cfg = self.config
        passages = number_passages(state.hits, limit=cfg.max_passages, max_chars=None)
        state.usage.attrs["generator"] = "extractive"
        if not passages:
            text, finish = within(NO_CONTEXT_TEXT, state.sampling)
            state.answer = Answer(text=text, finish_reason="no_context" if finish == "stop" else finish, generator="extractive")
            _emit([text], len(text), state.on_token)
            return state

        signals = self.signals(state, passages)
        state.answer = extractive_answer(signals, passages, cfg, state.on_token, state.sampling)
        state.usage.attrs.update(
            {
                "candidate_sentences": signals.n_sentences,
                "selected_sentences": len(state.answer.citations),
                "question_overlap": any(signals.lexical),
                "passages_considered": [p.chunk_id for p in passages],
            }
        )
        return state

    def signals(self, state: RequestState, passages: list[Passage]) -> Signals:
        """The four signals of every candidate sentence of `passages` (numbered), each scaled to [0, 1]."""
        terms = self.analyzer or analyzer_for(p.text for p in passages)
        candidates, long_enough, title_terms = _candidates(passages, terms, self.config.min_words)
        meaning = self._meaning(state, passages, long_enough) if self.reads_meaning else [0.0] * len(long_enough)
        q_terms = set(terms(state.query.text))
        idf = _idf(long_enough, q_terms)
        return Signals(long_enough, _scaled(meaning), _scaled(_lexical(long_enough, title_terms, q_terms, idf)),
                       [1 / c[0] for c in long_enough],
                       _scaled([sum(idf(t) for t in sorted(title_terms[c[0]] & q_terms)) for c in long_enough]),
                       len(candidates))

    def _meaning(self, state: RequestState, passages: list[Passage], candidates: list[_Candidate]) -> list[float]:
        """Cosine of each candidate sentence with the question, through the embedder's cache."""
        assert self.embedder is not None  # reads_meaning
        if not candidates:  # passages without a sentence (empty texts): nothing to embed, nothing to compare
            return []
        q = state.query
        chunks = {p.number: p.hit.chunk for p in passages}
        query = self.embedder.encode([q.text], [(q.tenant, q.scopes)], role="query")
        encoded = self.embedder.encode([c[2] for c in candidates], [(chunks[c[0]].tenant, chunks[c[0]].scopes) for c in candidates])
        state.usage.cache_hits += query.cache_hits + encoded.cache_hits
        state.usage.cache_misses += query.cache_misses + encoded.cache_misses
        return [float(v) for v in unit_vectors(encoded.vectors) @ unit_vectors(query.vectors)[0]]


_Candidate = tuple[int, int, str, frozenset[str]]  # (passage number, sentence index, text, terms)


@dataclass(frozen=True)
class Signals:
    """Per candidate sentence (those long enough, see ExtractiveConfig.min_words), in candidate order."""

    candidates: list[_Candidate]
    meaning: list[float]  # question-sentence cosine, scaled
    lexical: list[float]  # question terms' IDF, scaled
    retrieval: list[float]  # the passage's reciprocal rank
    title: list[float]  # question terms' IDF in the passage's title, scaled
    n_sentences: int  # every sentence of the passages, short ones included


def choose(signals: Signals, config: ExtractiveConfig) -> list[_Candidate]:
    """The `max_sentences` best candidates by the weighted score, ties by passage number then sentence order."""
    score = [config.meaning_weight * m + config.lexical_weight * x + config.rank_weight * r + config.title_weight * t
             for m, x, r, t in zip(signals.meaning, signals.lexical, signals.retrieval, signals.title)]
    order = sorted(range(len(score)), key=lambda i: (-score[i], signals.candidates[i][0], signals.candidates[i][1]))
    return [signals.candidates[i] for i in order[: config.max_sentences]]


def extractive_answer(signals: Signals, passages: list[Passage], config: ExtractiveConfig,
                      on_token: Callable[[str], None] | None = None, sampling: Sampling | None = None) -> Answer:
    """The chosen sentences, each with its [n], as an answer within the request's stop and max_tokens (each piece
    goes to `on_token`)."""
    pieces = _cited_pieces(choose(signals, config), config.max_chars)
    text, finish = within(" ".join(pieces), sampling)
    _emit(pieces, len(text), on_token)
    return Answer(text=text, citations=parse_citations(text, {p.number: p.hit.chunk for p in passages}),
                  finish_reason=finish, generator="extractive")


def within(text: str, sampling: Sampling | None) -> tuple[str, str]:
    """`text` cut before its first stop string, then after `max_tokens` words: (text, finish_reason)."""
    finish = "stop"
    if sampling is None:
        return text, finish
    cuts = [i for i in (text.find(s) for s in sampling.stop if s) if i >= 0]
    if cuts:
        text = text[: min(cuts)]
    spans = word_spans(text)
    if sampling.max_tokens is not None and len(spans) > sampling.max_tokens:
        text, finish = text[: spans[sampling.max_tokens - 1][1]], "length"
    return text.rstrip(), finish


def _emit(pieces: list[str], n_chars: int, on_token: Callable[[str], None] | None) -> None:
    """The pieces, space-joined, to `on_token` one by one, up to the answer's first `n_chars` characters."""
    sent = 0
    for i, piece in enumerate(pieces):
        piece = piece if i == 0 else " " + piece
        part = piece[: max(n_chars - sent, 0)]
        if not part or on_token is None:
            break
        on_token(part)
        sent += len(part)


def _candidates(passages: list[Passage], terms: Analyzer, min_words: int
                ) -> tuple[list[_Candidate], list[_Candidate], dict[int, frozenset[str]]]:
    """Every sentence of the passages with its terms; those of at least `min_words` words (all of them when none
    is that long); and each passage's title terms by passage number."""
    candidates: list[_Candidate] = []
    long_enough: list[_Candidate] = []
    title_terms: dict[int, frozenset[str]] = {}
    for p in passages:
        title_terms[p.number] = _analysed(terms, p.hit.chunk.title)
        for i, (sentence, sentence_terms, n_words) in enumerate(_analysed_sentences(terms, p.text)):
            candidate = (p.number, i, sentence, sentence_terms)
            candidates.append(candidate)
            if n_words >= min_words:
                long_enough.append(candidate)
    return candidates, long_enough or candidates, title_terms


# A sweep's trials answer from the same passages again and again (each K, retriever and fusion retrieves much the
# same ones): a passage's sentences and terms depend on its text and the analyzer alone, so each is analysed once.
@lru_cache(maxsize=1 << 14)
def _analysed_sentences(terms: Analyzer, text: str) -> tuple[tuple[str, frozenset[str], int], ...]:
    """Each sentence of `text` with its terms and its word count."""
    return tuple((sentence, frozenset(terms(sentence)), len(word_spans(sentence))) for sentence in sentences(text))


@lru_cache(maxsize=1 << 14)
def _analysed(terms: Analyzer, text: str) -> frozenset[str]:
    return frozenset(terms(text))


def _idf(candidates: list[_Candidate], q_terms: set[str]) -> Callable[[str], float]:
    """The IDF of a question term counted over the candidate sentences."""
    df: dict[str, int] = {}
    for *_, ts in candidates:
        for t in ts & q_terms:
            df[t] = df.get(t, 0) + 1
    n = len(candidates)
    return lambda t: math.log(1 + n / df.get(t, 1))


def _lexical(candidates: list[_Candidate], title_terms: dict[int, frozenset[str]], q_terms: set[str],
             idf: Callable[[str], float]) -> list[float]:
    """Lexical support of each candidate (module docstring); 0 for a sentence without a question term of its own
    (its title alone does not make it an answer)."""
    out = []
    for number, _, _, ts in candidates:
        matched = ts & q_terms
        from_title = (title_terms[number] & q_terms) - matched  # the title gives a sentence its context
        # summed in sorted order: a set's order changes with the process's hash seed, and float sums with order
        content = sum(idf(t) for t in sorted(matched)) + 0.5 * sum(idf(t) for t in sorted(from_title))
        out.append(content if matched else 0.0)
    return out


def _scaled(values: list[float]) -> list[float]:
    """Min-max scaled to [0, 1]; all equal (nothing to tell apart) -> all 0."""
    if not values:
        return []
    low, high = min(values), max(values)
    return [0.0] * len(values) if high <= low else [(v - low) / (high - low) for v in values]


def _cited_pieces(chosen: list[_Candidate], max_chars: int) -> list[str]:
    """Each chosen sentence with its [n], within max_chars: the one that overflows is cut at a word, and none
    is added once fewer than 40 characters are left."""
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
    return pieces
