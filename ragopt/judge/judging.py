"""Answers in, judged metrics out, through the verdict cache, with what the judging cost.

Per answer: `faithfulness` is the share of its sentences (citation markers removed, split by
`ragopt.text.sentences`) the judge finds supported by the passages the generator was given, over the
sentences whose verdict could be read; `answer_correctness` is 1 when the judge finds the answer agrees
with the reference (where there is one); `context_relevance` 1 when it finds the passages hold what the
question needs. An unreadable verdict counts in `failures` and in no score: a score is None when no
verdict behind it could be read, never NaN.

Verdicts are cached under (judge fingerprint, prompt version, exact request): an unchanged re-run makes no
judge call. Each new verdict is stored as soon as it is made, so an interrupted run loses at most one.
Failures from a timeout or a server error are not stored (the next run asks again); an unreadable output is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterator, Sequence

from ragopt.cache import Cache, CacheKey
from ragopt.errors import InputError
from ragopt.judge.judges import Judge
from ragopt.judge.verdicts import PROMPT_VERSION, Kind, Verdict, VerdictRequest, answer_requests
from ragopt.stages.citations import strip_markers

NAMESPACE = "judge-verdict"
METRICS: dict[str, Kind] = {"faithfulness": "claim", "answer_correctness": "correctness", "context_relevance": "context"}


@dataclass(frozen=True)
class JudgeItem:
    id: str
    question: str
    passages: tuple[str, ...]
    answer: str
    reference: str | None = None
    sentences: tuple[str, ...] | None = None  # claims already split (None: the answer's sentences)


@dataclass
class SentenceVerdict:
    text: str
    supported: bool | None


@dataclass
class ItemJudgement:
    id: str
    faithfulness: float | None
    sentences: list[SentenceVerdict]
    answer_correctness: float | None = None
    context_relevance: float | None = None
    failures: int = 0

    @property
    def unsupported(self) -> list[str]:
        return [s.text for s in self.sentences if s.supported is False]

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "unsupported": self.unsupported}


@dataclass
class JudgeTotals:
    """What one judging run spent: `calls` new verdicts, `cached` served from the cache; tokens and seconds of
    the new calls only."""

    calls: int = 0
    cached: int = 0
    failures: int = 0
    tokens: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def answer_sentences(answer: str) -> list[str]:
    """The answer's sentences to judge: markers removed, sentences without a word (a lone "[2].") dropped."""
    from ragopt.text import sentences, words

    return [s for s in (strip_markers(x) for x in sentences(answer)) if words(s)]


def verdict_key(judge: Judge, request: VerdictRequest) -> CacheKey:
    return CacheKey(namespace=NAMESPACE, model=judge.fingerprint, prompt_version=PROMPT_VERSION, payload=request.payload())


def plan_requests(items: Sequence[JudgeItem], metrics: Sequence[str]) -> tuple[list[list[VerdictRequest]], list[list[str]]]:
    kinds = [METRICS[m] for m in metrics]
    sentences = [list(it.sentences) if it.sentences is not None else answer_sentences(it.answer) for it in items]
    # correctness judges the answer without its citation markers: the same words cited differently agree alike
    requests = [answer_requests(it.question, it.passages, ss, strip_markers(it.answer), it.reference, kinds)
                for it, ss in zip(items, sentences)]
    return requests, sentences


def judge_items(
    items: Sequence[JudgeItem], judge: Judge, cache: Cache | None, *,
    metrics: Sequence[str] = tuple(METRICS), max_calls: int | None = None, usd_per_million_tokens: float = 0.0,
    progress: bool = False, desc: str = "judge",
) -> tuple[list[ItemJudgement], JudgeTotals]:
    """Judge every item; refuses (InputError naming --judge-max-calls) before its first call when more new
    calls than `max_calls` are needed."""
    from ragopt.progress import progress_bar

    requests, sentences = plan_requests(items, metrics)
    flat = [r for rs in requests for r in rs]
    keys = [verdict_key(judge, r) for r in flat]
    distinct = len({k.digest() for k in keys})  # a verdict asked twice is judged (and counted) once
    totals = JudgeTotals()

    def ask(missing: list[int]) -> Iterator[tuple[int, Verdict]]:
        if max_calls is not None and len(missing) > max_calls:
            raise InputError(f"{desc}: {len(missing)} new judge calls needed ({distinct - len(missing)} cached), more than the "
                             f"{max_calls} allowed", field="--judge-max-calls")
        for i in progress_bar(missing, desc=desc, unit="verdict", disable=not progress):
            verdict = judge.judge(flat[i])
            totals.calls += 1
            totals.tokens += verdict.tokens_in + verdict.tokens_out
            totals.seconds += verdict.seconds
            yield i, verdict

    found = (cache or Cache(None)).get_or_compute(
        keys, ask, save_every=1,  # each verdict stored as soon as it is made
        encode=lambda v: None if v.extra.get("transient") else {"supported": v.supported, "raw": v.raw},
        decode=lambda stored: Verdict(stored["supported"], raw=stored.get("raw", ""), cached=True))
    totals.cached = distinct - totals.calls
    totals.cost_usd = totals.tokens * usd_per_million_tokens / 1e6
    verdicts = {id(r): v.supported for r, v in zip(flat, found.values)}
    out = [_score(it, reqs, ss, verdicts) for it, reqs, ss in zip(items, requests, sentences)]
    totals.failures = sum(j.failures for j in out)
    return out, totals


def _score(item: JudgeItem, requests: list[VerdictRequest], sentences: list[str],
           supported: dict[int, bool | None]) -> ItemJudgement:
    """`supported` maps id(request) to its verdict."""
    verdicts = {id(r): supported[id(r)] for r in requests}
    claims = [r for r in requests if r.kind == "claim"]
    judged = [SentenceVerdict(s, verdicts[id(r)]) for s, r in zip(sentences, claims)]
    readable = [s.supported for s in judged if s.supported is not None]

    def single(kind: str) -> float | None:
        found = [verdicts[id(r)] for r in requests if r.kind == kind]
        return None if not found or found[0] is None else float(found[0])

    return ItemJudgement(
        id=item.id,
        faithfulness=sum(readable) / len(readable) if readable else None,
        sentences=judged,
        answer_correctness=single("correctness"),
        context_relevance=single("context"),
        failures=sum(1 for v in verdicts.values() if v is None),
    )
