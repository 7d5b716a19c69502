"""`--like QUERIES`: generated questions shaped like a user's own queries (no labels needed).

The examples are read from a text file (one query per line), a query log (tab-separated: the field with the
most words is the query, as in MS MARCO's `id<TAB>query`) or a BEIR queries.jsonl (`"text"`). Each usable
example becomes a shape: how many content words it has, how many function words ("of", "the", "how"; written
as a sentence or as keywords), whether it ends with "?", and three things measured against the passage the
round trip's retriever (hybrid by default) finds first for it (never a judgement: examples carry none):
whether it names that passage's title, the share of its content words the passage contains (the rest it says
in other words), and the share of the passage's words from the first to the last word it names (how much of a
passage a query draws on).

Each generated question takes the shape of one example picked by the seed, so lengths, forms and anchors keep
their mix and their correlations. Its key words come from a stretch of its document around one sentence, as
long as the example's spread: the words of the corpus vocabulary nearest the stretch's own embedding (what it
is about, as KeyBERT picks key words; people name a passage's subject, not its rarest words); the example's
share of them is kept as written, the rest replaced by related corpus words. Words are counted by the corpus's
analyzer and joined without spaces between Han characters (Chinese puts none).
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ragopt.errors import InputError
from ragopt.synth.extractive import Candidate, ExtractiveQuestionGenerator
from ragopt.text import has_han, words
from ragopt.types import Document

MAX_QUERY_WORDS = 64  # a longer line is a passage, not a query
MAX_EXAMPLES = 1000
QUERY_KEYS = ("text", "query", "question")


def read_examples(path: str | Path) -> list[str]:
    """The usable queries of `path`, in file order, duplicates dropped; one line naming the problem otherwise."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path, field="--like")
    raw = path.read_bytes()
    if b"\x00" in raw[:8192]:
        raise InputError("a binary file, not queries (one per line, a query log or a queries.jsonl)", path=path, field="--like")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start}): give queries one per line", path=path, field="--like") from None
    lines = text.splitlines()
    first = next((line.strip() for line in lines if line.strip()), "")
    if first[:1] in ("[", "<") or first.startswith("%PDF"):
        raise InputError("not queries one per line (a JSON, HTML/XML or PDF document): give a text file, a query log "
                         "or a queries.jsonl", path=path, field="--like")
    found = _jsonl_queries(lines, path) if first.startswith("{") else [_log_query(line) for line in lines]
    usable = list(dict.fromkeys(q for q in found if q and 0 < len(words(q)) <= MAX_QUERY_WORDS and not q.isdigit()))
    if not usable:
        raise InputError(f"no usable line: a query is 1 to {MAX_QUERY_WORDS} words on one line", path=path, field="--like")
    return usable[:MAX_EXAMPLES]


def _jsonl_queries(lines: Sequence[str], path: Path) -> list[str]:
    out = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise InputError("not a JSON object (a queries.jsonl has one per line)", path=path, line=n, field="--like") from None
        if not isinstance(row, dict):
            raise InputError("not a JSON object (a queries.jsonl has one per line)", path=path, line=n, field="--like")
        if "title" in row:
            raise InputError("a document with a title: this is a corpus, not queries", path=path, line=n, field="--like")
        key = next((k for k in QUERY_KEYS if isinstance(row.get(k), str)), None)
        if key is None:
            raise InputError(f"no query text (one of {', '.join(QUERY_KEYS)})", path=path, line=n, field="--like")
        out.append(" ".join(row[key].split()))
    return out


def _log_query(line: str) -> str:
    fields = [" ".join(f.split()) for f in line.split("\t")]
    return max(fields, key=lambda f: len(words(f)))  # the first of the wordiest fields


@dataclass(frozen=True)
class Shape:
    content: int  # content words
    function: int  # function words (stopwords)
    question_mark: bool
    names_title: bool  # it names the title of the passage the retriever finds first for it
    named: float  # the share of its content words that passage contains (the rest it says in other words)
    spread: float  # the share of that passage's words from the first to the last word it names


@dataclass(frozen=True)
class Style:
    shapes: tuple[Shape, ...]

    def summary(self) -> dict[str, Any]:
        n = len(self.shapes)
        return {"examples": n, "content_words_median": statistics.median(s.content for s in self.shapes),
                "sentence_form_share": round(sum(s.function > 0 for s in self.shapes) / n, 4),
                "question_mark_share": round(sum(s.question_mark for s in self.shapes) / n, 4),
                "names_title_share": round(sum(s.names_title for s in self.shapes) / n, 4),
                "named_share_mean": round(statistics.fmean(s.named for s in self.shapes), 4),
                "spread_median": round(statistics.median(s.spread for s in self.shapes), 4)}


class Retrieval:
    """The user's corpus as whole documents, searched by the round trip's retriever (ragopt/synth/filters.py
    searcher): hybrid by default, the best of the three on two of the three labelled collections."""

    def __init__(self, searched: dict[str, Callable[..., Any]], documents: dict[str, Document]):
        self.search, self.embed, self.documents = searched["search"], searched["embed"], documents


def measure_shapes(examples: Sequence[str], generator: ExtractiveQuestionGenerator, retrieval: Retrieval) -> tuple[Shape, ...]:
    """Each example's shape; what it names is measured against the passage retrieval finds first for it (no
    judgement: the examples carry none)."""
    retrieval.embed(examples)
    shapes = []
    for query in examples:
        tokens = generator.words(query)
        content = list(dict.fromkeys(w for w in tokens if generator.is_content_word(w)))
        function = sum(not generator.tokenizer(w) for w in tokens)  # what the analyzer drops: stopwords
        first = retrieval.search(query)[:1]
        passage = retrieval.documents[first[0]] if first else None
        title = set(generator.tokenizer(passage.title or "")) if passage else set()
        names_title = bool(title) and title <= set(generator.tokenizer(query))
        named, spread = _named(content, passage, generator)
        shapes.append(Shape(max(1, len(content)), function, query.rstrip().endswith(("?", "？")), names_title, named,
                            spread))
    return tuple(shapes)


def _named(content: Sequence[str], passage: Document | None, generator: ExtractiveQuestionGenerator) -> tuple[float, float]:
    """(the share of `content` whose stems the passage has, the share of the passage's words from the first to the
    last of them: how much of a passage a query draws on)."""
    if passage is None or not content:
        return 0.0, 0.0
    wanted = [set(generator.tokenizer(w)) for w in content]
    text_words = generator.words(passage.text)
    text_stems = [set(generator.tokenizer(w)) for w in text_words]
    has = set(generator.tokenizer(passage.title or "")).union(*text_stems)
    named = sum(bool(s & has) for s in wanted) / len(content)
    every = set().union(*wanted)
    at = [i for i, t in enumerate(text_stems) if t & every]
    spread = (at[-1] - at[0] + 1) / len(text_words) if len(at) > 1 else 0.0
    return named, spread


def join_words(tokens: Sequence[str]) -> str:
    """Words joined as their script writes them: a space between words, none between Han characters."""
    out = ""
    for t in tokens:
        if out and not (has_han(out[-1]) and has_han(t[0])):
            out += " "
        out += t
    return out


class StyledQuestionGenerator(ExtractiveQuestionGenerator):
    """The extractive generator, each question in the shape of one of the user's queries (see the module)."""

    name = "extractive"
    prompt_version = "extractive-like-3"

    def __init__(self, documents: Sequence[Document], embedder: Any, config: Any, workspace: Path):
        super().__init__(documents, embedder, config, workspace)
        self.style: Style | None = None  # learnt once the corpus can be searched (ragopt/synth/generate.py)

    def learn(self, examples: Sequence[str], retrieval: Retrieval) -> Style:
        self.style = Style(measure_shapes(examples, self, retrieval))
        return self.style

    def candidate(self, doc: Document, span: tuple[int, int], rng: random.Random) -> Candidate | None:
        """A question in the shape of one example: key words drawn from a stretch of the document around the
        sentence as long as the example's spread, those nearest the stretch's meaning, the example's share of them
        kept as written and the rest said in other words (related corpus words)."""
        assert self.style is not None, "learn the style first"
        shape = rng.choice(self.style.shapes)
        start, end = self._stretch(doc, span, shape.spread)
        passage = doc.text[start:end]
        title_words = self.words(doc.title or "") if shape.names_title and self.tokenizer(doc.title or "") else []
        n_keys = max(1, shape.content - sum(self.is_content_word(w) for w in title_words))
        tokens = [passage[s:e].casefold() for s, e in self.tokenizer.word_spans(passage)]
        keys = self._central(dict.fromkeys(w for w in tokens if self.is_content_word(w)), passage, n_keys)
        if not keys:
            return None
        n_kept = max(1, round(shape.named * len(keys))) if shape.named > 0 else 0
        kept = set(rng.sample(sorted(keys), n_kept))
        stems = set(self.tokenizer(passage))
        said: dict[str, str] = {}
        for w in sorted(keys):
            other = None if w in kept else self.related(w, stems, rng)
            said[w] = other if other is not None else w
            if other is not None:
                stems |= set(self.tokenizer(other))
        query = self._render(tokens, keys, said, shape.function)
        query = [w for w in title_words if w not in query] + query
        return Candidate(doc.id, start, end, passage, join_words(query) + ("?" if shape.question_mark else ""), passage)

    def _stretch(self, doc: Document, span: tuple[int, int], spread: float) -> tuple[int, int]:
        """The character span of the sentence widened, evenly on both sides within the document, to `spread` of
        the document's words."""
        at = self.tokenizer.word_spans(doc.text)
        inside = [i for i, (s, e) in enumerate(at) if s >= span[0] and e <= span[1]]
        if not inside:
            return span
        sentence = inside[-1] - inside[0] + 1
        length = max(sentence, round(spread * len(at)))
        first = min(max(0, inside[0] - (length - sentence) // 2), len(at) - length)
        return min(span[0], at[first][0]), max(span[1], at[first + length - 1][1])

    def _central(self, words: dict[str, None], passage: str, n: int) -> set[str]:
        """The `n` of `words` nearest the passage's own embedding (what it is about, as KeyBERT picks key words),
        among words of the corpus vocabulary (in two documents or more: people's words are not a document's
        rarest)."""
        known = sorted(w for w in words if w in self._position)
        if not known:
            return set()
        vector = self.embedder.encode([passage], progress=False, use_cache=False).vectors[0]
        sims = self._vectors[[self._position[w] for w in known]] @ vector
        return {known[int(i)] for i in np.argsort(-sims, kind="stable")[:n]}

    def _render(self, tokens: list[str], keys: set[str], said: dict[str, str], function: int) -> list[str]:
        """Key words in the order of their stretch; in sentence form, with up to `function` of the function words
        between the first and last key word (the other content words are left out)."""
        at = [i for i, w in enumerate(tokens) if w in keys]
        out: list[str] = []
        seen: set[str] = set()
        for w in tokens[at[0]: at[-1] + 1]:
            if w in keys and w not in seen:
                out.append(said[w])
                seen.add(w)
            elif function > 0 and w not in keys and not self.is_content_word(w) and w.isalpha():
                out.append(w)
                function -= 1
        return out
