"""`--like QUERIES`: generated questions shaped like a user's own queries (no labels needed).

The examples are read from a text file (one query per line), a query log (tab-separated: the field with the
most words is the query, as in MS MARCO's `id<TAB>query`) or a BEIR queries.jsonl (`"text"`). Each usable
example becomes a shape: how many content words it has, how many function words ("of", "the", "how"; written
as a sentence or as keywords), whether it ends with "?", and two things measured against the corpus with the
retriever the round trip uses (the passage it finds first for the example, never a judgement): the share of
the example's content words that passage contains (how much of the passage a query names) and whether the
example names that passage's title (titles and entities as anchors). Each generated question takes the
shape of one example picked by the seed, so lengths, forms and anchors keep their mix and their
correlations; the words it keeps as written are the examples' median share of named words. Words are
counted by the corpus's analyzer and joined without spaces between Han characters (Chinese puts none).
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ragopt.errors import InputError
from ragopt.synth.extractive import Candidate, ExtractiveQuestionGenerator
from ragopt.text import has_han, words
from ragopt.types import Document

MAX_QUERY_WORDS = 64  # a longer line is a passage, not a query
MAX_EXAMPLES = 1000
KEEP_GRID = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # the share of key words kept as written, calibrated per corpus
PILOT = 40  # documents whose questions calibrate it
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


@dataclass(frozen=True)
class Style:
    shapes: tuple[Shape, ...]
    agreement: float  # the examples' mean top-10 overlap (Jaccard) of BM25 and dense retrieval
    keep_fraction: float = 0.0  # calibrated: the pilot keep whose questions' overlap comes nearest `agreement`
    pilot: tuple[tuple[float, float], ...] = ()  # (keep, its questions' overlap)

    def summary(self) -> dict[str, Any]:
        n = len(self.shapes)
        return {"examples": n, "content_words_median": statistics.median(s.content for s in self.shapes),
                "sentence_form_share": round(sum(s.function > 0 for s in self.shapes) / n, 4),
                "question_mark_share": round(sum(s.question_mark for s in self.shapes) / n, 4),
                "names_title_share": round(sum(s.names_title for s in self.shapes) / n, 4),
                "bm25_dense_overlap": round(self.agreement, 4), "keep_fraction": self.keep_fraction,
                "pilot": [[k, round(a, 4)] for k, a in self.pilot]}


class Retrieval:
    """The user's corpus as whole documents, searched by BM25 and by the dense model (ragopt/synth/filters.py searchers)."""

    def __init__(self, search: dict[str, Callable[..., Any]], documents: dict[str, Document]):
        self.bm25, self.dense, self.embed, self.documents = search["bm25"], search["dense"], search["embed"], documents

    def overlap(self, queries: Sequence[str]) -> float:
        """Mean Jaccard of the two top-10 document sets: how lexical the queries are, measured without labels
        (a query that names its passage's words finds the same documents both ways)."""
        self.embed(queries)
        shares = []
        for q in queries:
            a, b = set(self.bm25(q)), set(self.dense(q))
            shares.append(len(a & b) / len(a | b) if a | b else 1.0)
        return statistics.fmean(shares) if shares else 0.0


def measure_shapes(examples: Sequence[str], generator: ExtractiveQuestionGenerator, retrieval: Retrieval) -> tuple[Shape, ...]:
    retrieval.embed(examples)
    shapes = []
    for query in examples:
        tokens = generator.words(query)
        content = sum(generator.is_content_word(w) for w in tokens)
        function = sum(not generator.tokenizer(w) for w in tokens)  # what the analyzer drops: stopwords
        first = retrieval.dense(query)[:1]
        title = set(generator.tokenizer(retrieval.documents[first[0]].title or "")) if first else set()
        names_title = bool(title) and title <= set(generator.tokenizer(query))
        shapes.append(Shape(max(1, content), function, query.rstrip().endswith(("?", "？")), names_title))
    return tuple(shapes)


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
    prompt_version = "extractive-like-1"

    def __init__(self, documents: Sequence[Document], embedder: Any, config: Any, workspace: Path):
        super().__init__(documents, embedder, config, workspace)
        self.style: Style | None = None  # learnt once the corpus can be searched (ragopt/synth/generate.py)

    def learn(self, examples: Sequence[str], retrieval: Retrieval, pilot_documents: Sequence[Document], seed: int) -> Style:
        """The examples' shapes, and the keep fraction whose pilot questions (one per pilot document, the same
        sentences and draws for every keep) overlap between BM25 and dense as much as the examples do."""
        self.style = Style(measure_shapes(examples, self, retrieval), retrieval.overlap(examples))
        pilot = []
        for keep in KEEP_GRID:
            asked = []
            for d in pilot_documents:
                spans = self.sentences(d)
                rng = random.Random(f"pilot\x1f{seed}\x1f{d.id}")
                c = self.candidate(d, spans[rng.randrange(len(spans))], rng, keep) if spans else None
                if c is not None:
                    asked.append(c.question)
            pilot.append((keep, retrieval.overlap(asked)))
        best = min(pilot, key=lambda p: (abs(p[1] - self.style.agreement), p[0]))[0]
        self.style = Style(self.style.shapes, self.style.agreement, best, tuple(pilot))
        return self.style

    def candidate(self, doc: Document, span: tuple[int, int], rng: random.Random, keep: float | None = None) -> Candidate | None:
        assert self.style is not None, "learn the style first"
        keep = self.style.keep_fraction if keep is None else keep
        shape = rng.choice(self.style.shapes)
        sentence = doc.text[span[0]:span[1]]
        title_words = self.words(doc.title or "") if shape.names_title and self.tokenizer(doc.title or "") else []
        n_keys = max(1, shape.content - sum(self.is_content_word(w) for w in title_words))
        tokens = [sentence[s:e].casefold() for s, e in self.tokenizer.word_spans(sentence)]
        content = dict.fromkeys(w for w in tokens if self.is_content_word(w))
        ranked = sorted(content, key=lambda w: (self.df.get(w, 1), w))  # rarest first
        keys = set(ranked[:n_keys])
        if not keys:
            return None
        kept = set(rng.sample(sorted(keys), max(1, round(keep * len(keys))) if keep > 0 else 0))
        stems = set(self.tokenizer(sentence))
        said: dict[str, str] = {}
        for w in sorted(keys):
            other = None if w in kept else self.related(w, stems, rng)
            said[w] = other if other is not None else w
            if other is not None:
                stems |= set(self.tokenizer(other))
        query = self._render(tokens, keys, said, shape.function)
        query = [w for w in title_words if w not in query] + query
        return Candidate(doc.id, span[0], span[1], sentence, join_words(query) + ("?" if shape.question_mark else ""), sentence)

    def _render(self, tokens: list[str], keys: set[str], said: dict[str, str], function: int) -> list[str]:
        """Key words in sentence order; in sentence form, with up to `function` of the function words between
        the first and last key word (the other content words are left out)."""
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
