"""Per-query scores of one trial's outcomes: rankings against qrels, spans against evidence, answers'
citations against the gold documents and spans, and answer text against references (cached by content)."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from ragopt.cache import Cache, CacheKey
from ragopt.config import PerObject, fingerprint
from ragopt.data import EvalQuery, EvalSet, Evidence
from ragopt.eval import metrics as M
from ragopt.eval.executor import QueryOutcome, code_fingerprint
from ragopt.eval.results import ROUTED_SMALL_SHARE
from ragopt.eval.space import CITATION_METRICS, LIVE_METRICS, SweepConfig
from ragopt.text.routing import SMALL
from ragopt.types import LIVE_DOC_PREFIX, Chunk

SCORES_NAMESPACE = "trial-scores"


def trial_scores(outcomes: Sequence[QueryOutcome], evalset: EvalSet, config: SweepConfig, names: Sequence[str],
                 cache: Cache, corpus_fingerprint: str) -> dict[str, list[float | None]]:
    """One trial's per-query rank, citation and answer scores, remembered by what they are computed from (the
    outcomes' rankings and answers, the labelled queries, the documents' texts by their index's
    `corpus_fingerprint`, the metrics asked for, the scoring code), so a warm re-run of a sweep does not score
    its trials again."""
    answer_metrics = [n for n in names if n in config.answer_metrics] if config.answers_on() else []

    live = any(o.live for o in outcomes)  # answers holding live data: scored afresh, never remembered

    def compute(_: list[int]) -> Iterator[tuple[int, dict[str, list[float | None]]]]:
        per_query = rank_scores(outcomes, evalset, names, config.span_coverage)
        if config.answers_on():
            per_query.update(citation_scores(outcomes, evalset))
            if answer_metrics:
                per_query.update(answer_scores(outcomes, evalset, answer_metrics, None if live else cache))
            if LIVE_METRICS[0] in names:
                per_query.update(live_scores(outcomes, evalset))
        yield 0, per_query

    if live:
        return next(compute([0]))[1]

    key = CacheKey(namespace=SCORES_NAMESPACE, payload={
        "outcomes": fingerprint([[o.query_id, o.ranking, o.answer] for o in outcomes]),
        "queries": queries_fingerprint(evalset.queries), "corpus": corpus_fingerprint,
        "names": sorted(names), "span_coverage": config.span_coverage,
        "answers": config.answers_on(), "answer_metrics": answer_metrics, "code": code_fingerprint()})
    return cache.get_or_compute([key], compute).values[0]


# The labelled queries' fingerprint, computed once for the list a sweep scores all its trials against.
queries_fingerprint = PerObject(lambda queries: fingerprint([q.model_dump(mode="json") for q in queries]), kept=16)


def rank_scores(outcomes: Sequence[QueryOutcome], evalset: EvalSet, names: Sequence[str],
                span_coverage: float = M.DEFAULT_MIN_COVERAGE) -> dict[str, list[float | None]]:
    """Document-level metrics (a document ranks where its best chunk does), span recall (a span counts as
    found when `span_coverage` of its characters lie in retrieved chunks) and the character metrics."""
    qids = [o.query_id for o in outcomes]
    qrels = {q.query.id: q.relevance for q in evalset.queries}
    run = {o.query_id: M.doc_ranking(doc for _, doc, _, _, _ in o.ranking) for o in outcomes}
    rank_names = [n for n in names if "@" in n and not n.startswith(("span_", "chars_"))]
    per_query = M.evaluate_run(run, qrels, rank_names, query_ids=qids)
    span_ks = sorted({M.parse_metric(n)[1] for n in names if n.startswith("span_recall@")})
    chars_ks = sorted({M.parse_metric(n)[1] for n in names if n.startswith("chars_")})
    evidence = {q.query.id: q.evidence for q in evalset.queries}
    spans = {o.query_id: [(doc, start, end) for _, doc, start, end, _ in o.ranking] for o in outcomes}
    if span_ks:
        per_query.update(M.evaluate_spans(spans, evidence, span_ks, query_ids=qids, min_coverage=span_coverage))
    if chars_ks:  # the ranking is what reaches the prompt (after any widening), in its order
        chars = M.evaluate_chars(spans, evidence, chars_ks, query_ids=qids)
        per_query.update((n, v) for n, v in chars.items() if n in names)
    return per_query


def contains_reference(answer: str, reference: str) -> bool:
    """Whether the answer states its reference answer verbatim (case and runs of whitespace ignored): a strict
    correctness proxy for short factual references such as "mmol/L" or "VARCHAR(2)"."""
    norm = lambda text: " ".join(text.lower().split())  # noqa: E731
    return norm(reference) in norm(answer)


def live_scores(outcomes: Sequence[QueryOutcome], evalset: EvalSet) -> dict[str, list[float | None]]:
    """For questions with a live reference: whether the answer states the documents' part and the live part (an
    answer marked incomplete never counts as stating the live part), and whether it came out incomplete. None
    for the other questions."""
    by_id = {q.query.id: q for q in evalset.queries}
    out: dict[str, list[float | None]] = {name: [] for name in LIVE_METRICS}
    for o in outcomes:
        q, answer = by_id[o.query_id], o.answer_model()
        if not q.live_reference or answer is None:
            for name in LIVE_METRICS:
                out[name].append(None)
            continue
        out["doc_part_contains_reference"].append(
            None if q.reference_answer is None else float(contains_reference(answer.text, q.reference_answer)))
        out["live_part_contains_reference"].append(
            float(not answer.incomplete and contains_reference(answer.text, q.live_reference)))
        out["incomplete_share"].append(float(answer.incomplete))
    return out


def route_scores(outcomes: Sequence[QueryOutcome], routing: str | None) -> dict[str, list[float | None]]:
    """Per query, 1 when the small backend answered it, else 0: the question's own route where the trial routes
    each one, else the trial's `routing` (PlanConfig.routing: the extractive generator is the "always small" end,
    an LLM that does not route the "always default" one); None where nothing answers."""
    routes = [o.route or routing for o in outcomes]
    return {ROUTED_SMALL_SHARE: [None if route is None else float(route == SMALL) for route in routes]}


def citation_gold(query: EvalQuery) -> list[Evidence | str]:
    """What a citation is scored against: the query's evidence spans, else its relevant documents."""
    return list(query.evidence) or [d for d, grade in query.relevance.items() if grade > 0]


def citation_scores(outcomes: Sequence[QueryOutcome], evalset: EvalSet) -> dict[str, list[float | None]]:
    """Citation precision/recall of each answer against the gold evidence (else the relevant documents), at
    document and span level (a cited chunk overlaps a gold span), beside the always-cite-[1] floor: what citing
    the top passage after every sentence would score.

    Where the set has reference answers, span precision and its floor are also given over the answers that
    state their reference (`*_if_correct`): attribution follows what the answer says, so a model that answers
    from the wrong passage is cited to it; this pair separates the attribution's precision from the answer's.
    Answer-contains-reference has its floor too: whether the lead of the top passage, cut to the answer's length
    (markers left out), contains the reference (`answer_lead_contains_reference`)."""
    from ragopt.eval.citations import first_passage_floor, score_answer_citations
    from ragopt.stages.citations import strip_markers

    by_id = {q.query.id: q for q in evalset.queries}
    docs = evalset.doc_map()
    out: dict[str, list[float | None]] = {name: [] for name in CITATION_METRICS}
    for o in outcomes:
        answer = o.answer_model()
        if answer is not None:  # citations of documents: a tool's live passage is scored as the live part instead
            answer.citations = [c for c in answer.citations if not (c.doc_id or "").startswith(LIVE_DOC_PREFIX)]
        q = by_id[o.query_id]
        gold = citation_gold(q)
        passages = [Chunk(id=cid, doc_id=doc, start=start, end=end, text="") for cid, doc, start, end, _ in o.ranking]
        cs = score_answer_citations(answer, gold, passages) if answer is not None else None
        floor = first_passage_floor(passages[0] if passages else None, gold)
        correct = (contains_reference(answer.text, q.reference_answer)
                   if answer is not None and q.reference_answer else None)
        lead_correct = None
        if correct is not None:
            top = docs[passages[0].doc_id].text[passages[0].start : passages[0].end] if passages else ""
            lead = " ".join(top.split())[: len(strip_markers(answer.text))]
            lead_correct = contains_reference(lead, q.reference_answer)
        values = {
            "citation_precision": cs and cs.precision, "citation_recall": cs and cs.recall,
            "citation_valid_share": cs and cs.valid_share, "citation_span_precision": cs and cs.span_precision,
            "citation_span_recall": cs and cs.span_recall, "citation_floor_precision": floor.precision,
            "citation_floor_span_precision": floor.span_precision,
            "answer_contains_reference": None if correct is None else float(correct),
            "answer_lead_contains_reference": None if lead_correct is None else float(lead_correct),
            "citation_span_precision_if_correct": cs.span_precision if correct else None,
            "citation_floor_span_precision_if_correct": floor.span_precision if correct else None,
        }
        for name in CITATION_METRICS:
            out[name].append(values[name])
    return out


def answer_scores(
    outcomes: Sequence[QueryOutcome], evalset: EvalSet, metrics: Sequence[str], cache: Cache | None
) -> dict[str, list[float | None]]:
    """ragas string metrics of each answer against its reference; each distinct (metric, answer, reference)
    is scored once, in one batch, and remembered in `cache` for later runs and in this process for later trials."""
    from ragopt.eval.answers import AnswerSample, score_answers

    refs = {q.query.id: q.reference_answer for q in evalset.queries}
    pairs = [(o.answer["text"] if o.answer else None, refs.get(o.query_id)) for o in outcomes]

    scorable = sorted({(r, ref) for r, ref in pairs if r is not None and ref is not None})
    known: dict[tuple[str, str, str], Any] = {}
    for metric in metrics:
        todo = []
        for r, ref in scorable:
            if (metric, r, ref) in _ANSWER_SCORES:
                known[(metric, r, ref)] = _ANSWER_SCORES[(metric, r, ref)]
            else:
                todo.append((r, ref))

        def score(missing: list[int], metric: str = metric, todo: list[tuple[str, str]] = todo) -> Iterator[tuple[int, Any]]:
            samples = [AnswerSample(response=todo[i][0], reference=todo[i][1]) for i in missing]
            yield from zip(missing, score_answers(samples, [metric])[metric])  # one batch per metric

        keys = [CacheKey(namespace="answer-score", payload=[metric, r, ref]) for r, ref in todo]
        computed = {(metric, r, ref): v for (r, ref), v in zip(todo, (cache or Cache(None)).get_or_compute(keys, score).values)}
        known.update(computed)
        if len(_ANSWER_SCORES) + len(computed) > ANSWER_SCORES_KEPT:
            _ANSWER_SCORES.clear()
        _ANSWER_SCORES.update(computed)
    return {
        metric: [None if r is None or ref is None else known.get((metric, r, ref)) for r, ref in pairs]
        for metric in metrics
    }


# (metric, answer, reference) -> score, for this process: the sweep's trials give the same answers again and again,
# and each is looked up in the cache (a key built and hashed) only the first time. A score depends on these three
# alone (ragas' string metrics, deterministic). Bounded, for a long-running process.
_ANSWER_SCORES: dict[tuple[str, str, str], Any] = {}
ANSWER_SCORES_KEPT = 1 << 17
