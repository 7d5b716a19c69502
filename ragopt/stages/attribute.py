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
from typing import Literal, Mapping, Sequence

from ragopt.config import StrictModel, knob
from ragopt.pipeline import RequestState
from ragopt.stages.citations import marker_spans, parse_citations, strip_markers
from ragopt.stages.prompt import FittedPrompt, Passage, PromptConfig, number_passages
from ragopt.stages.spec import BuildContext, StageSpec
from ragopt.text import Analyzer, analyzer_for, sentence_spans
from ragopt.types import Chunk

_TERMINAL = re.compile(r"[.!?。！？；…]+[\"')\]”’」』）》]*$")


class AttributeConfig(StrictModel):
    mode: Literal["replace", "repair", "answer"] = knob(
        "replace", sweep=["replace", "repair", "answer"],
        description="replace or repair the model's markers sentence by sentence, or cite one passage for the whole answer")
    min_support: float = knob(0.2, sweep=[0.1, 0.2, 0.4], ge=0, le=1, description="least weighted word share a cited passage must cover")
    rank_margin: float = knob(0.0, sweep=[0.0, 0.1, 0.2], ge=0, le=1,
                              description="cite the best-ranked passage whose support is within this of the best")


def choose_passage(support: dict[int, float], min_support: float, rank_margin: float) -> int | None:
    """The passage a sentence cites: the best-ranked (lowest number) whose support reaches `min_support` and
    comes within `rank_margin` of the best support; None when no passage reaches `min_support`."""
    eligible = [n for n, s in support.items() if s >= min_support]
    if not eligible:
        return None
    best = max(support[n] for n in eligible)
    return min(n for n in eligible if support[n] >= best - rank_margin)


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
                 analyzer: Analyzer | None = None):
        self.config = config or AttributeConfig()
        self.prompt = prompt or PromptConfig()
        self.name = name
        self.analyzer = analyzer

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
        spans = sentence_spans(text)
        if not spans:
            return state
        # each marker goes to the sentence holding it, or to the previous one when it opens a sentence
        own: list[list[int]] = [[] for _ in spans]
        starts = [s for s, _ in spans]
        for start, _, nums in marker_spans(text):
            i = max(bisect.bisect_right(starts, start) - 1, 0)
            if i > 0 and not strip_markers(text[spans[i][0] : start]):
                i -= 1
            own[i].extend(nums)
        cores = [strip_markers(text[s:e]) for s, e in spans]
        cfg = self.config
        terms = self.analyzer or analyzer_for(p.text for p in passages)
        if cfg.mode == "answer":  # one citation for the whole answer, after its last sentence
            whole = choose_passage(self._support([" ".join(cores)], passages, terms)[0], cfg.min_support, cfg.rank_margin)
            last = max((i for i, core in enumerate(cores) if core), default=None)
            picks = [[whole] if i == last and whole is not None else [] for i in range(len(cores))]
        else:
            picks = [[] if (n := choose_passage(s, cfg.min_support, cfg.rank_margin)) is None else [n]
                     for s in self._support(cores, passages, terms)]
        repaired = added = replaced = 0
        pieces: list[str] = []
        for i, core in enumerate(cores):
            valid = list(dict.fromkeys(n for n in own[i] if n in numbered))
            invalid = [n for n in own[i] if n not in numbered]
            if cfg.mode == "repair" and valid:
                cites = valid
            else:
                cites = picks[i]
                if valid and cites != valid:
                    replaced += 1
            repaired += len(invalid)
            if cites and not own[i]:
                added += 1
            if core:
                pieces.append(_cite(core, cites))
            if i + 1 < len(spans):
                pieces.append(text[spans[i][1] : spans[i + 1][0]])  # whitespace: sentence spans cover all else
        new_text = re.sub(r"[ \t]{2,}", " ", "".join(pieces)).strip()  # a markers-only sentence leaves two gaps
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

    @staticmethod
    def _support(sentences: Sequence[str], passages: Sequence[Passage], terms: Analyzer) -> list[dict[int, float]]:
        return word_support(sentences, {p.number: f"{p.hit.chunk.title} {p.text}" for p in passages}, terms)


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
    return AttributeCitations(config, analyzer=ctx.analyzer())


SPEC = StageSpec("cite", CiteConfig, _build, slot="cite")
