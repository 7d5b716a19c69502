"""Training examples from an evaluation split: positives from its qrels, hard negatives from ragopt's own index.

The corpus is indexed as whole documents (one chunk per document), so a hit is a document and a passage's
text is exactly what retrieval embeds (`Chunk.indexed_text`). Negatives are the best-ranked documents the
split does not judge relevant; `skip` passes over the very top ones, which on sparsely judged sets such as
SciFact are often relevant but unjudged.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from ragopt.config import ChunkerConfig, RetrievalConfig, StrictModel, fingerprint, needs_vectors
from ragopt.data import EvalSet, load_evalset
from ragopt.errors import InputError


class MiningConfig(StrictModel):
    miner: Literal["bm25", "hybrid"] = Field("bm25", description="the retriever whose mistakes become negatives")
    depth: int = Field(30, gt=0, description="hits searched for negatives per query")
    negatives: int = Field(1, gt=0, description="hard negatives per (query, positive) pair")
    skip: int = Field(0, ge=0, description="best-ranked non-relevant hits passed over (likely unjudged positives)")


@dataclass(frozen=True)
class Example:
    query: str
    positive: str
    negatives: tuple[str, ...]
    query_id: str


def load_split(dataset: str | Path, split: str) -> EvalSet:
    """The evaluation set of one split; a split without a single relevant judgement is an InputError naming
    its qrels file."""
    evalset = load_evalset(dataset, split=split)
    if not any(grade > 0 for q in evalset.queries for grade in q.relevance.values()):
        qrels = Path(dataset) / "qrels" / f"{split}.tsv"
        where = qrels if qrels.exists() else Path(dataset)
        raise InputError(f"split {split!r} has no relevance judgements to train on", path=where)
    return evalset


def data_fingerprint(evalset: EvalSet) -> str:
    """What the training data depends on: the corpus, the split's queries and their judgements."""
    from ragopt.index import corpus_fingerprint

    queries = [[q.query.id, q.query.text, sorted(q.relevance.items())] for q in evalset.queries]
    return fingerprint({"corpus": corpus_fingerprint(evalset.documents), "queries": queries})


def mine_examples(evalset: EvalSet, workspace: Path, config: MiningConfig, *, progress: bool = True) -> list[Example]:
    """One example per (query, relevant document) with `config.negatives` hard negatives each; deterministic:
    the split's order, negatives taken best-ranked first."""
    from ragopt.index import build_index, make_embedder
    from ragopt.pipeline import Pipeline
    from ragopt.plan import retrieval_stages

    embedder = make_embedder(workspace)  # the base model: mining must not depend on the model being trained
    dense = needs_vectors(config.miner)
    report = build_index(evalset.documents, ChunkerConfig(chunker="whole"), embedder, workspace, progress=progress, dense=dense)
    index = report.index
    text_of = {c.doc_id: c.indexed_text for c in index.chunks}
    retrieval = RetrievalConfig(retriever=config.miner, top_k=config.depth)
    pipeline = Pipeline(retrieval_stages(index, embedder, retrieval))
    results = pipeline.run_many([q.query for q in evalset.queries], progress=progress)
    examples = []
    for q, result in zip(evalset.queries, results):
        positives = [d for d, grade in q.relevance.items() if grade > 0]
        ranked = [h.chunk.doc_id for h in result.hits if q.relevance.get(h.chunk.doc_id, 0) <= 0]
        negatives = tuple(text_of[d] for d in ranked[config.skip : config.skip + config.negatives])
        if len(negatives) < config.negatives:
            continue  # too few candidates to fill every column; MNRL needs the same number in each example
        examples.extend(Example(q.query.text, text_of[d], negatives, q.query.id) for d in positives)
    if not examples:
        raise InputError("no training example: every query lacks a hard negative at this mining depth", field="depth")
    return examples


def spread_batches(examples: list[Example], batch_size: int, seed: int) -> list[list[Example]]:
    """Shuffled batches in which a query appears at most once where possible: with in-batch negatives a
    query's second positive in the same batch would be pushed away as a negative."""
    rng = random.Random(seed)
    by_query: dict[str, list[Example]] = {}
    for ex in examples:
        by_query.setdefault(ex.query_id, []).append(ex)
    groups = list(by_query.values())
    rng.shuffle(groups)
    order: list[Example] = []
    for round_ in range(max(len(g) for g in groups)):  # first positives of all queries, then the seconds...
        order.extend(g[round_] for g in groups if round_ < len(g))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
