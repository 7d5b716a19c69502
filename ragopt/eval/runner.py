"""Runs one retrieval configuration over an evaluation set (`ragopt eval`), and the run-file helpers."""

from __future__ import annotations

import math
from typing import Iterable
from pathlib import Path

from ragopt.config import RetrievalConfig
from ragopt.data import EvalSet
from ragopt.index import Index
from ragopt.eval.executor import QueryOutcome, run_trial
from ragopt.plan import PlanConfig
from ragopt.plan import kind_in_slot, pipeline_for
from ragopt.stages.spec import PROMPT_SLOT
from ragopt.backends.embeddings import Embedder


def best_per_doc(chunk_scores: Iterable[tuple[str, float]], limit: int | None = None) -> list[tuple[str, float]]:
    """(doc id, score) of each document once, scored by its best chunk; the input is sorted best first, so
    a document's first chunk is its best."""
    best: dict[str, float] = {}
    for doc_id, score in chunk_scores:
        best.setdefault(doc_id, score)
    return list(best.items())[:limit]


def chunk_depth(index: Index, docs_wanted: int) -> int:
    """How many chunks to retrieve so that about `docs_wanted` distinct documents come back."""
    per_doc = math.ceil(index.manifest.n_chunks / max(index.manifest.n_documents, 1))
    return min(index.manifest.n_chunks, docs_wanted * (1 if per_doc == 1 else 2 * per_doc))


def run_queries(
    evalset: EvalSet, index: Index, embedder: Embedder, config: RetrievalConfig, k: int, *, progress: bool = True,
    workspace: Path | None = None, context_tokenizer: str = "embedder",
) -> list[QueryOutcome]:
    """Every query through the plan's pipeline at depth `k` chunks, by the executor the sweep uses, with the
    same prompt stage a sweep trial has (so context tokens and latency mean the same). Queries are encoded
    afresh, so the latency does not depend on what an earlier run cached."""
    plan = PlanConfig(chunker=index.manifest.chunker, embedder=embedder.config, retrieval=config.model_copy(update={"top_k": k}),
                      stages={kind_in_slot(PROMPT_SLOT): {"tokenizer": context_tokenizer}})
    pipeline = pipeline_for(plan, index, embedder, workspace or index.path.parent.parent)
    outcomes, _ = run_trial(pipeline, [q.query for q in evalset.queries], progress=progress)
    return outcomes


def trec_id(value: str) -> str:
    """An id as a TREC run file's whitespace-separated column can hold it: each whitespace character and "%"
    percent-encoded (UTF-8), everything else as it is ("Nelson Mandela" -> "Nelson%20Mandela";
    urllib.parse.unquote gives the id back). Ids without whitespace or "%" are unchanged."""
    from urllib.parse import quote

    return "".join(quote(c, safe="") if c.isspace() or c == "%" else c for c in value)


def write_contexts(path: str | Path, rankings: Iterable[tuple[str, Iterable[tuple[str, str, int, int, float]]]]) -> None:
    """What reached each question's prompt, checkable by anyone: one JSON line per question, `{"id": question id,
    "contexts": [{"doc_id", "start", "end"}, ...]}`, the passages in prompt order after any widening, from
    (query id, [(chunk id, doc id, start, end, score), ...]) as a trial's outcomes hold them."""
    import json

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for qid, ranking in rankings:
            contexts = [{"doc_id": doc, "start": start, "end": end} for _, doc, start, end, _ in ranking]
            f.write(json.dumps({"id": qid, "contexts": contexts}, ensure_ascii=False) + "\n")


def write_trec(path: str | Path, tag: str, rankings: Iterable[tuple[str, Iterable[tuple[str, float]]]]) -> None:
    """TREC run format, `qid Q0 docid rank score tag`, from (query id, [(doc id, score), ...] best first); ids and
    the tag go through `trec_id`, so every line has six columns whatever the ids hold."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tag = trec_id(tag)
    with open(path, "w", encoding="utf-8") as f:
        for qid, docs in rankings:
            for rank, (doc_id, score) in enumerate(docs, start=1):
                f.write(f"{trec_id(qid)} Q0 {trec_id(doc_id)} {rank} {score:.6f} {tag}\n")
