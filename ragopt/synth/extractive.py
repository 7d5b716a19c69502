"""Extractive pseudo-questions that do not simply copy their passage.

A question is made from one sentence of a document (that sentence is its evidence span and its reference
answer): its `query_words` key words (content words, rarest in the corpus first), a `keep_fraction` of
them kept as written, every other one replaced by a related word of the corpus vocabulary that the sentence
does not contain and that shares no stem with it: the nearest by the embedding model, one of the three
nearest picked by the seed. So a question shares some words with its passage, as people's questions do, and
says the rest in other words, instead of favouring BM25 with a lexical copy (the naive copy measured Kendall
tau 0.05 against real questions; see ../shared/NOTES.md).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from ragopt.backends.embeddings import Embedder
from ragopt.synth import SynthConfig
from ragopt.text import analyzer_for, sentence_spans
from ragopt.types import Document

GENERATOR_VERSION = "extractive-1"
MIN_SENTENCE_WORDS, MAX_SENTENCE_WORDS = 6, 60
NEIGHBOURS = 3


@dataclass(frozen=True)
class Candidate:
    """A generated question with its evidence span `text[start:end]` of document `doc_id` (start -1: the
    generator's evidence was not found in the document) and its reference answer."""

    doc_id: str
    start: int
    end: int
    evidence: str
    question: str
    answer: str


class ExtractiveQuestionGenerator:
    name = "extractive"
    prompt_version = GENERATOR_VERSION

    def __init__(self, documents: Sequence[Document], embedder: Embedder, config: SynthConfig, workspace: Path):
        self.documents, self.embedder, self.config, self.workspace = documents, embedder, config, workspace
        self.tokenizer = analyzer_for(d.text for d in documents)  # the corpus's language: English, Chinese...
        df: dict[str, int] = {}
        for d in documents:
            for w in set(self.words(d.text)):
                df[w] = df.get(w, 0) + 1
        self.df = df

    def words(self, text: str) -> list[str]:
        """The analyzer's words as written (casefolded; no stemming, stopwords kept)."""
        return [text[s:e].casefold() for s, e in self.tokenizer.word_spans(text)]

    @property
    def model_fingerprint(self) -> str:
        return f"embedder:{self.embedder.fingerprint}"

    def is_content_word(self, word: str) -> bool:
        """A word worth asking with: letters only, not a stopword, and not a short Latin word."""
        return word.isalpha() and (len(word) >= 3 or not word.isascii()) and bool(self.tokenizer(word))

    @cached_property
    def vocabulary(self) -> list[str]:
        """Content words in at least two documents, in sorted order."""
        return sorted(w for w, n in self.df.items() if n >= 2 and self.is_content_word(w))

    @cached_property
    def _vectors(self) -> np.ndarray:
        """The vocabulary's embeddings, computed in one pass and kept as one file: a re-run after a kill
        recomputes all of it in the same batches, so neighbours (and the questions) come out the same."""
        from ragopt.backends.exact_store import save_npy
        from ragopt.config import fingerprint

        path = self.workspace / "synth" / f"vocabulary-{fingerprint([self.embedder.fingerprint, self.vocabulary])}.npy"
        if path.exists():
            return np.load(path)
        vocab = self.vocabulary
        vectors = self.embedder.encode(vocab, progress=False, use_cache=False).vectors if vocab else np.zeros((0, 1), np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_npy(path, vectors)
        return vectors

    @cached_property
    def _position(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.vocabulary)}

    def related(self, word: str, avoid_stems: set[str], rng: random.Random) -> str | None:
        """One of the nearest vocabulary words to `word` whose stem is not in `avoid_stems`."""
        i = self._position.get(word)
        if i is None:
            return None
        sims = self._vectors @ self._vectors[i]
        out: list[str] = []
        for j in np.argsort(-sims, kind="stable")[: 50]:
            other = self.vocabulary[int(j)]
            if not set(self.tokenizer(other)) & avoid_stems:
                out.append(other)
            if len(out) == NEIGHBOURS:
                break
        return rng.choice(out) if out else None

    def sentences(self, doc: Document) -> list[tuple[int, int]]:
        """Sentences worth a question: long enough to say something, short enough to be one fact."""
        spans = []
        for s, e in sentence_spans(doc.text):
            n = len(self.words(doc.text[s:e]))
            if MIN_SENTENCE_WORDS <= n <= MAX_SENTENCE_WORDS:
                spans.append((s, e))
        return spans

    def candidate(self, doc: Document, span: tuple[int, int], rng: random.Random) -> Candidate | None:
        sentence = doc.text[span[0]:span[1]]
        tokens = [w for w in self.words(sentence) if self.is_content_word(w)]
        n_docs = len(self.documents)
        ranked = sorted(dict.fromkeys(tokens), key=lambda w: (-math.log(n_docs / self.df.get(w, 1)), w))
        keys = set(ranked[: self.config.query_words])
        if len(keys) < 2:
            return None
        key_words = [w for w in dict.fromkeys(tokens) if w in keys]  # sentence order
        keep = set(rng.sample(key_words, max(1, round(self.config.keep_fraction * len(key_words)))))
        stems = set(self.tokenizer(sentence))
        query = []
        for w in key_words:
            if w in keep:
                query.append(w)
                continue
            other = self.related(w, stems, rng)
            query.append(other if other is not None else w)  # no related word in a tiny corpus: keep it
            if other is not None:
                stems |= set(self.tokenizer(other))
        return Candidate(doc.id, span[0], span[1], sentence, " ".join(query), sentence)
