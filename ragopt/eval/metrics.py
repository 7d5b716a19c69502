"""Retrieval metrics over one query's ranking: pure functions, trec_eval / ranx conventions.

Ground truth is judged at document level so that scores are comparable across chunk sizes: a retrieved
chunk counts for its parent document and each document counts once (`doc_ranking` does that mapping,
keeping the first occurrence). Where the dataset has evidence spans, `span_recall_at_k` judges chunks
by how much of each gold span they hold: a span is found when at least half of its characters (the
`min_coverage` share, configurable) lie in the retrieved chunks; `chars_at_k` counts characters instead
(recall, precision and IoU of the evidence characters in the passages, Chroma's chunking-report definitions).

Conventions (the same as ranx and trec_eval, so the numbers agree to floating-point precision):
- a document is relevant when its grade is > 0; documents missing from the qrels have grade 0;
- recall@k = relevant docs in the top k / all relevant docs (0 when the query has none);
- precision@k = relevant docs in the top k / k (k, not the number retrieved);
- hit@k = 1 when any relevant doc is in the top k;
- mrr@k = 1 / rank of the first relevant doc in the top k (0 when none);
- ndcg@k: gain = grade, discount log2(rank + 1), ideal DCG from the qrels' best k grades.
A query with no relevant document scores 0 on every metric (ranx's choice); leave such queries out of
an evaluation set rather than letting them pull a mean down.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from ragopt.data import Evidence
from ragopt.errors import InputError

Ranking = Sequence[str]
Qrels = Mapping[str, int]
ChunkSpan = tuple[str, int, int]  # (doc_id, start, end) of a retrieved chunk, in rank order


def doc_ranking(chunk_doc_ids: Iterable[str]) -> list[str]:
    """The parent-document ranking of a chunk ranking: each document once, at its first (best) rank."""
    seen: set[str] = set()
    out: list[str] = []
    for doc_id in chunk_doc_ids:
        if doc_id not in seen:
            seen.add(doc_id)
            out.append(doc_id)
    return out


def _check_k(k: int) -> None:
    if k <= 0:
        raise ValueError(f"k must be a positive integer, got {k}")


def _n_relevant(qrels: Qrels) -> int:
    return sum(1 for grade in qrels.values() if grade > 0)


def _relevant_in_top(ranking: Ranking, qrels: Qrels, k: int) -> int:
    return sum(1 for doc_id in ranking[:k] if qrels.get(doc_id, 0) > 0)


def recall_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    _check_k(k)
    n_rel = _n_relevant(qrels)
    return _relevant_in_top(ranking, qrels, k) / n_rel if n_rel else 0.0


def precision_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    _check_k(k)
    return _relevant_in_top(ranking, qrels, k) / k


def hit_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    _check_k(k)
    return 1.0 if _relevant_in_top(ranking, qrels, k) else 0.0


def mrr_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    _check_k(k)
    for rank, doc_id in enumerate(ranking[:k], start=1):
        if qrels.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0


def _dcg(gains: Iterable[float]) -> float:
    return sum(g / math.log2(rank + 1) for rank, g in enumerate(gains, start=1) if g > 0)


def ndcg_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """Graded nDCG (Järvelin & Kekäläinen; trec_eval's and ranx's `ndcg`): gain = grade, not 2^grade - 1."""
    _check_k(k)
    ideal = _dcg(sorted((g for g in qrels.values() if g > 0), reverse=True)[:k])
    if ideal == 0.0:
        return 0.0
    return _dcg(max(qrels.get(doc_id, 0), 0) for doc_id in ranking[:k]) / ideal


DEFAULT_MIN_COVERAGE = 0.5


def _covered_chars(start: int, end: int, chunks: Iterable[tuple[int, int]]) -> int:
    """Characters of [start, end) that lie in the union of the chunk intervals (overlapping chunks count once)."""
    covered, reach = 0, start
    for s, e in sorted((max(s, start), min(e, end)) for s, e in chunks):
        if e <= max(s, reach):  # outside the span, or already counted
            continue
        covered += e - max(s, reach)
        reach = e
    return covered


def span_found(ev: Evidence, chunks: Sequence[ChunkSpan], min_coverage: float = DEFAULT_MIN_COVERAGE) -> bool:
    """Whether the chunks hold at least `min_coverage` of the span's characters (together: two chunks that
    each hold half of a span cover all of it). Whole-document evidence is found by any chunk of its document."""
    own = [(s, e) for d, s, e in chunks if d == ev.doc_id]
    if ev.start is None or ev.end is None:
        return bool(own)
    return _covered_chars(ev.start, ev.end, own) >= min_coverage * (ev.end - ev.start)


def span_recall_at_k(
    chunks: Sequence[ChunkSpan], evidence: Sequence[Evidence], k: int, min_coverage: float = DEFAULT_MIN_COVERAGE
) -> float:
    """The share of evidence spans found in the top-k chunks (k counts chunks).

    A span counts as found when at least `min_coverage` (default 0.5) of its characters lie in the top-k
    chunks, so a chunk that grazes a span by one character does not count; 1.0 demands the whole span.
    A whole-document evidence item (start/end None) is found by any chunk of that document.
    Returns NaN when there is no evidence: span recall is undefined for that query, not zero.
    """
    _check_k(k)
    if not 0 < min_coverage <= 1:
        raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage}")
    if not evidence:
        return math.nan
    top = chunks[:k]
    return sum(1 for ev in evidence if span_found(ev, top, min_coverage)) / len(evidence)


DocMetric = Callable[[Ranking, Qrels, int], float]

DOC_METRICS: dict[str, DocMetric] = {
    "recall": recall_at_k,
    "precision": precision_at_k,
    "hit": hit_at_k,
    "mrr": mrr_at_k,
    "ndcg": ndcg_at_k,
}
SPAN_METRICS = ("span_recall",)
CHAR_METRICS = ("chars_recall", "chars_precision", "chars_iou")
METRIC_NAMES = (*DOC_METRICS, *SPAN_METRICS, *CHAR_METRICS)

_NAME_RE = re.compile(r"^([a-z_]+)@(\d+)$")


def parse_metric(name: str) -> tuple[str, int]:
    """'ndcg@10' -> ('ndcg', 10). Case-insensitive; an unknown or malformed name is an InputError."""
    m = _NAME_RE.match(name.strip().lower())
    if not m or m.group(1) not in METRIC_NAMES or int(m.group(2)) <= 0:
        raise InputError(
            f"unknown metric {name!r}: expected NAME@K with K > 0 and NAME one of {', '.join(METRIC_NAMES)}",
            field="metric",
        )
    return m.group(1), int(m.group(2))


def evaluate_run(
    run: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Qrels],
    metrics: Sequence[str],
    query_ids: Sequence[str] | None = None,
) -> dict[str, list[float]]:
    """Per-query scores of a document-level run: {metric name: [score per query]}.

    `run` maps query id -> ranked doc ids (de-duplicated again here, defensively: `doc_ranking` is
    idempotent). Scores are aligned with `query_ids`, by default the qrels' query ids in their order;
    a query missing from the run scores as an empty ranking. Only document metrics are accepted here;
    span recall needs chunk positions (see `evaluate_spans`).
    """
    parsed = [(name, *parse_metric(name)) for name in metrics]
    for name, base, _ in parsed:
        if base not in DOC_METRICS:
            raise InputError(f"{name!r} needs chunk spans; use evaluate_spans or evaluate_chars", field="metric")
    qids = list(qrels) if query_ids is None else list(query_ids)
    rankings = {qid: doc_ranking(run.get(qid, ())) for qid in qids}
    return {
        name: [DOC_METRICS[base](rankings[qid], qrels.get(qid, {}), k) for qid in qids]
        for name, base, k in parsed
    }


def evaluate_spans(
    chunk_run: Mapping[str, Sequence[ChunkSpan]],
    evidence: Mapping[str, Sequence[Evidence]],
    ks: Sequence[int],
    query_ids: Sequence[str] | None = None,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
) -> dict[str, list[float]]:
    """{"span_recall@k": [score per query]} aligned with `query_ids` (default: evidence's keys); NaN where a
    query has no evidence spans. `min_coverage` as in `span_recall_at_k`."""
    qids = list(evidence) if query_ids is None else list(query_ids)
    return {
        f"span_recall@{k}": [
            span_recall_at_k(chunk_run.get(qid, ()), evidence.get(qid, ()), k, min_coverage) for qid in qids
        ]
        for k in ks
    }


def _union(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint [start, end) ranges covering the same characters (empty ranges dropped)."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(r for r in ranges if r[1] > r[0]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def chars_at_k(passages: Sequence[ChunkSpan], evidence: Sequence[Evidence], k: int) -> tuple[float, float, float]:
    """(recall, precision, IoU) in characters of the first k passages against the evidence spans, Chroma's
    definitions (its chunking report's `base_evaluation.py`), per document:
    - covered = evidence characters inside some passage (each character once, however many passages hold it);
    - recall = covered / evidence characters;
    - precision = covered / the passages' summed lengths (overlapping passages count twice, as Chroma's do);
    - IoU = covered / (the passages' summed lengths + evidence characters left uncovered).
    Overlapping evidence spans count once. Whole-document evidence items (no offsets) are left out; NaN for all
    three when a query has no evidence span (undefined, not zero)."""
    _check_k(k)
    gold: dict[str, list[tuple[int, int]]] = {}
    for ev in evidence:
        if ev.start is not None and ev.end is not None:
            gold.setdefault(ev.doc_id, []).append((ev.start, ev.end))
    gold = {doc: _union(spans) for doc, spans in gold.items()}
    total = sum(e - s for spans in gold.values() for s, e in spans)
    if not total:
        return math.nan, math.nan, math.nan
    top = passages[:k]
    retrieved = sum(max(end - start, 0) for _, start, end in top)
    covered = sum(_covered_chars(s, e, [(ps, pe) for d, ps, pe in top if d == doc])
                  for doc, spans in gold.items() for s, e in spans)
    precision = covered / retrieved if retrieved else 0.0
    return covered / total, precision, covered / (retrieved + total - covered)


def evaluate_chars(
    passage_run: Mapping[str, Sequence[ChunkSpan]],
    evidence: Mapping[str, Sequence[Evidence]],
    ks: Sequence[int],
    query_ids: Sequence[str] | None = None,
) -> dict[str, list[float]]:
    """{"chars_recall@k", "chars_precision@k", "chars_iou@k": [score per query]} for each k (see `chars_at_k`),
    aligned with `query_ids` (default: evidence's keys); the passages are those that reach the prompt, in its order."""
    qids = list(evidence) if query_ids is None else list(query_ids)
    out: dict[str, list[float]] = {}
    for k in ks:
        scores = [chars_at_k(passage_run.get(qid, ()), evidence.get(qid, ()), k) for qid in qids]
        for i, base in enumerate(CHAR_METRICS):
            out[f"{base}@{k}"] = [s[i] for s in scores]
    return out


def mean(values: Iterable[float | None]) -> float | None:
    """Mean over the defined values (None and NaN left out); None when nothing is defined."""
    defined = [v for v in values if v is not None and not math.isnan(v)]
    return sum(defined) / len(defined) if defined else None
