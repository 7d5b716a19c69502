"""Post-hoc citation attribution: each answer sentence cites the passage that supports it best.

Small models often cite nothing, cite passages they were not given, or cite the wrong one. This stage runs
after generation and rewrites the answer's `[n]` markers from the text itself: for each answer sentence
(`ragopt.text.sentence_spans`; a marker that opens a sentence belongs to the one before it), the support of
passage n is the IDF-weighted share of the sentence's content words that occur in the passage's title or
text (IDF over the passages of this answer, so words every passage shares weigh little). Words are the BM25
analyzer's terms (`ragopt.text.analyzers`: stemmed English, segmented Chinese), the plan's index's analyzer or,
when none is given, the one the passages' script calls for. The best passage
(ties: the better-ranked) is cited when its support reaches `min_support`; a sentence without enough
support for any passage (e.g. "I cannot answer from the sources") cites nothing. With `rank_margin`, the
best-ranked passage whose support comes within that margin of the best is cited instead: a small model's
paraphrase makes small support gaps noise, while retrieval's order is evidence too.

Modes: "replace" cites every sentence by support alone; "repair" keeps a sentence's valid model citations
and only replaces invalid markers or adds missing ones; "answer" cites one passage, the one best supporting
the whole answer (more words than one sentence), after the last sentence. The model's own citations stay visible
in the trace (attrs `model_citations`, `model_invalid`, `repaired`, `added`, `replaced`). Word overlap did
best in the citation study (../shared/NOTES.md): span-level precision 0.48 against 0.18 for SmolLM2's own
citations, at about 0.1 ms per answer.

Passage numbers: the fitted prompt's when a prompt stage left one in `state.prompt` (exactly the passages the
model saw, after its token budget), else `number_passages` over the hits with the prompt config's limits, as
the generators number them.
"""

from __future__ import annotations

import bisect
import math
import re
from typing import Callable, Literal, Mapping, Sequence

import numpy as np

from ragopt.backends.embeddings import Embedder
from ragopt.backends.exact_store import unit_vectors
from ragopt.config import StrictModel, knob
from ragopt.pipeline import RequestState
from ragopt.stages.citations import marker_spans, parse_citations, strip_markers
from ragopt.stages.prompt import FittedPrompt, Passage, PromptConfig, number_passages
from ragopt.stages.spec import BuildContext, StageSpec
from ragopt.text import Analyzer, analyzer_for, sentence_spans
from ragopt.types import Chunk

# Not selected on data yet: no labelled LLM answers with passage-level support are at hand to select it on
# (lfqa_verification is for measuring judges, never for fitting). 0 keeps support to shared words until it is.
DEFAULT_MEANING_WEIGHT = 0.0
_TERMINAL_CHARS, _CLOSING = ".!?。！？；…", "\"')]”’」』）》"
_TERMINAL = re.compile(rf"[{re.escape(_TERMINAL_CHARS)}]+[{re.escape(_CLOSING)}]*$")
_HELD = _TERMINAL_CHARS + _CLOSING + " \t\n\r\f\v"


class AttributeConfig(StrictModel):
    mode: Literal["replace", "repair", "answer"] = knob(
        "replace", sweep=["replace", "repair", "answer"],
        description="replace or repair the model's markers sentence by sentence, or cite one passage for the whole answer")
    min_support: float = knob(0.2, sweep=[0.1, 0.2, 0.4], ge=0, le=1, description="least weighted word share a cited passage must cover")
    rank_margin: float = knob(0.0, sweep=[0.0, 0.1, 0.2], ge=0, le=1,
                              description="cite the best-ranked passage whose support is within this of the best")
    meaning_weight: float = knob(DEFAULT_MEANING_WEIGHT, sweep=[0.0, 0.5, 1.0], ge=0, le=1,
                                 description="share of a passage's support that is meaning (embedder cosine of sentence "
                                             "and passage) rather than shared words")


def choose_passage(support: dict[int, float], min_support: float, rank_margin: float) -> int | None:
    """The passage a sentence cites: the best-ranked (lowest number) whose support reaches `min_support` and
    comes within `rank_margin` of the best support; None when no passage reaches `min_support`."""
    eligible = [n for n, s in support.items() if s >= min_support]
    if not eligible:
        return None
    best = max(support[n] for n in eligible)
    return min(n for n in eligible if support[n] >= best - rank_margin)


def _sentences(text: str) -> tuple[list[tuple[int, int]], list[list[int]], list[str]]:
    """The answer's sentence spans, the numbers each one's markers cite (a marker that opens a sentence belongs
    to the one before it), and each one's text without markers."""
    spans = sentence_spans(text)
    own: list[list[int]] = [[] for _ in spans]
    starts = [s for s, _ in spans]
    for start, _, nums in marker_spans(text):
        i = max(bisect.bisect_right(starts, start) - 1, 0)
        if i > 0 and not strip_markers(text[spans[i][0] : start]):
            i -= 1
        own[i].extend(nums)
    return spans, own, [strip_markers(text[s:e]) for s, e in spans]


def _joined(text: str, spans: Sequence[tuple[int, int]], cores: Sequence[str], cites: Sequence[list[int]]) -> str:
    """The cited sentences of `cores` with the whitespace between `spans` (one more span than cores: the gap up
    to it is kept)."""
    pieces: list[str] = []
    for i, core in enumerate(cores):
        if core:
            pieces.append(_cite(core, cites[i]))
        if i + 1 < len(spans):
            pieces.append(text[spans[i][1] : spans[i + 1][0]])  # whitespace: sentence spans cover all else
    return "".join(pieces)


def _tidy(text: str) -> str:
    return re.sub(r"[ \t]{2,}", " ", text).strip()  # a markers-only sentence leaves two gaps


def _unfinished(core: str) -> str:
    """A sentence still being written, up to what no continuation changes: an unclosed `[` may be a marker's
    start, and trailing space and punctuation may be where a cited number goes."""
    bracket = core.rfind("[")
    if bracket >= 0 and "]" not in core[bracket:]:
        core = core[:bracket]
    return core.rstrip(_HELD)


def _cite(sentence: str, numbers: Sequence[int]) -> str:
    """`sentence [n]` with the markers before its final punctuation: "Paris is big [1]."."""
    if not numbers:
        return sentence
    markers = "".join(f"[{n}]" for n in numbers)
    end = _TERMINAL.search(sentence)
    cut = end.start() if end else len(sentence)
    return f"{sentence[:cut].rstrip()} {markers}{sentence[cut:]}"


class AttributeCitations:
    """Pipeline stage: rewrites `state.answer`'s citations from word overlap with the passages."""

    reads = ("answer", "hits")
    writes = ("answer",)

    def __init__(self, config: AttributeConfig | None = None, prompt: PromptConfig | None = None, name: str = "attribute",
                 analyzer: Analyzer | None = None, embedder: Embedder | None = None):
        self.config = config or AttributeConfig()
        self.prompt = prompt or PromptConfig()
        self.name = name
        self.analyzer = analyzer
        self.embedder = embedder  # the plan's; without one, support is shared words alone

    def identity(self) -> dict[str, object]:
        """What decides the citations besides the request: the config and, when meaning counts, the embedder."""
        meaning = self.embedder is not None and self.config.meaning_weight > 0
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}", "name": self.name,
                "config": self.config.model_dump(mode="json"), "prompt": self.prompt.model_dump(mode="json"),
                "embedder": self.embedder.fingerprint if meaning else None}

    def passages(self, state: RequestState) -> list[Passage]:
        if isinstance(state.prompt, FittedPrompt):
            return list(state.prompt.passages)
        return number_passages(state.hits, limit=self.prompt.max_passages, max_chars=self.prompt.max_passage_chars)

    def run(self, state: RequestState) -> RequestState:
        answer = state.answer
        passages = self.passages(state)
        if answer is None or not passages:
            return state
        numbered: dict[int, Chunk] = {p.number: p.hit.chunk for p in passages}
        text = answer.text
        spans, own, cores = _sentences(text)
        if not spans:
            return state
        last = max((i for i, core in enumerate(cores) if core), default=None)
        cites = self.cites(state, cores, own, passages, last)
        repaired = added = replaced = 0
        for i in range(len(spans)):
            valid = [n for n in own[i] if n in numbered]
            repaired += len(own[i]) - len(valid)
            replaced += bool(valid) and cites[i] != list(dict.fromkeys(valid))
            added += bool(cites[i]) and not own[i]
        new_text = _tidy(_joined(text, spans, cores, cites))
        model_cites = parse_citations(text, numbered)
        state.answer = answer.model_copy(update={"text": new_text, "citations": parse_citations(new_text, numbered)})
        state.usage.attrs.update(
            {
                "model_citations": [c.marker for c in model_cites if c.valid],
                "model_invalid": [c.marker for c in model_cites if not c.valid],
                "repaired": repaired,
                "added": added,
                "replaced": replaced,
            }
        )
        return state

    def cites(self, state: RequestState, cores: list[str], own: list[list[int]], passages: Sequence[Passage],
              last: int | None) -> list[list[int]]:
        """The numbers each sentence cites; `last` is the answer's last sentence that says something (mode "answer"
        cites there; None while the answer is still being written: no sentence is its last yet)."""
        cfg = self.config
        numbered = {p.number for p in passages}
        terms = self.analyzer or analyzer_for(p.text for p in passages)
        if cfg.mode == "answer":  # one citation for the whole answer, after its last sentence
            whole = None if last is None else choose_passage(
                self.support(state, [" ".join(cores)], passages, terms)[0], cfg.min_support, cfg.rank_margin)
            return [[whole] if i == last and whole is not None else [] for i in range(len(cores))]
        picks = [[] if (n := choose_passage(s, cfg.min_support, cfg.rank_margin)) is None else [n]
                 for s in self.support(state, cores, passages, terms)]
        valid = [list(dict.fromkeys(n for n in nums if n in numbered)) for nums in own]
        return [v if cfg.mode == "repair" and v else pick for v, pick in zip(valid, picks)]

    def streamer(self, state: RequestState) -> Callable[[str], str]:
        """For a streamed answer (ragopt.pipeline.AnswerStream): the answer text so far -> the start of what `run`
        will make of it. A sentence is cited once the next one has begun (its markers, which may open the next
        sentence, are all known then); the sentence being written is sent up to its last word, so that a marker
        still coming, or the cited number before its final punctuation, finds its place."""
        passages = self.passages(state)
        done: dict[int, str] = {}  # sentences closed -> their cited text: cited once, however often the text grows

        def settled(text: str) -> str:
            if not passages:
                return text
            spans, own, cores = _sentences(text)
            said = [i for i, core in enumerate(cores) if _unfinished(core)]
            if not said:
                return ""
            j = said[-1]  # the sentence being written: those before it are closed
            if j not in done:
                cites = self.cites(state, cores[:j], own[:j], passages, None)
                done[j] = _joined(text, spans[: j + 1], cores[:j], cites)
            return _tidy(done[j] + _unfinished(strip_markers(text[spans[j][0] :])))

        return settled

    def support(self, state: RequestState, sentences: Sequence[str], passages: Sequence[Passage],
                terms: Analyzer) -> list[dict[int, float]]:
        """Per sentence: {passage number: support}, the weighted share of its words found in the passage, blended
        with `meaning_weight` of the sentence-passage cosine (below zero counts as zero)."""
        words = word_support(sentences, {p.number: f"{p.hit.chunk.title} {p.text}" for p in passages}, terms)
        w = self.config.meaning_weight
        if self.embedder is None or w == 0 or not sentences:
            return words
        q = state.query
        said = self.embedder.encode(list(sentences), [(q.tenant, q.scopes)] * len(sentences), role="query")
        # the passages' own indexed texts: cache hits when the index was embedded by this embedder
        given = self.embedder.encode([p.hit.chunk.indexed_text for p in passages],
                                     [(p.hit.chunk.tenant, p.hit.chunk.scopes) for p in passages])
        state.usage.cache_hits += said.cache_hits + given.cache_hits
        state.usage.cache_misses += said.cache_misses + given.cache_misses
        cosine = np.clip(unit_vectors(said.vectors) @ unit_vectors(given.vectors).T, 0.0, 1.0)
        return [{p.number: (1 - w) * ws.get(p.number, 0.0) + w * float(cosine[i, j]) for j, p in enumerate(passages)}
                for i, ws in enumerate(words)]


def word_support(sentences: Sequence[str], passages: Mapping[int, str], terms: Analyzer | None = None) -> list[dict[int, float]]:
    """Per sentence: {passage number: IDF-weighted share of the sentence's words found in the passage text}.
    IDF is over these passages, so words every passage shares weigh little (the judge's `support` baseline too).
    Words are `terms`' (the BM25 analyzer; by default the one the passages' script calls for)."""
    terms = terms or analyzer_for(passages.values())
    passage_terms = {n: set(terms(text)) for n, text in passages.items()}
    df: dict[str, int] = {}
    for ts in passage_terms.values():
        for t in ts:
            df[t] = df.get(t, 0) + 1
    k = len(passages)
    out = []
    for sentence in sentences:
        words = set(terms(sentence))
        weight = {t: math.log(1 + k / df.get(t, 1)) for t in sorted(words)}  # sorted: sums must not depend
        total = sum(weight.values())                                        # on the process's hash seed
        out.append(
            {n: sum(weight[t] for t in sorted(words & ts)) / total for n, ts in passage_terms.items()} if total else {}
        )
    return out


class CiteConfig(AttributeConfig):
    """Post-hoc attribution after generation: on or off (a sweep dimension), then how."""

    enabled: bool = knob(True, sweep=[False, True], description="attribute each answer sentence to its best passage")


def _build(config: CiteConfig, ctx: BuildContext) -> AttributeCitations | None:
    if not config.enabled or not ctx.plan.generates():
        return None
    return AttributeCitations(config, analyzer=ctx.analyzer(), embedder=ctx.embedder)


SPEC = StageSpec("cite", CiteConfig, _build, slot="cite")
