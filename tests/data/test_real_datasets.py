"""The real datasets in ../shared/data load with the counts their SOURCE.md states (skipped where absent)."""

from __future__ import annotations

import json
from collections import Counter

from fixtures.paths import shared_dataset

from ragopt.data.beir import load_beir


def test_scifact_test_split_counts_and_sentence_evidence() -> None:
    folder = shared_dataset("scifact")
    es = load_beir(folder, split="test")
    assert len(es.documents) == 5183
    assert len(es.queries) == 300
    assert sum(len(q.relevance) for q in es.queries) == 339
    assert all(set(q.relevance.values()) == {1} for q in es.queries)
    assert all(d.title and d.text for d in es.documents[:50])

    with_spans = [q for q in es.queries if q.evidence]
    assert len(with_spans) == 188  # the other 112 are "not enough info" claims

    # every span is exactly one stripped sentence of the original abstract, cut at sentence boundaries
    abstracts = {}
    with open(folder / "original_format" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            abstracts[str(obj["doc_id"])] = [s.strip() for s in obj["abstract"]]
    docs = es.doc_map()
    checked = 0
    for q in with_spans:
        for ev in q.evidence:
            assert ev.doc_id in q.relevance
            text = docs[ev.doc_id].text
            assert ev.start is not None and ev.end is not None
            piece = text[ev.start : ev.end]
            assert piece in abstracts[ev.doc_id]
            assert ev.start == 0 or text[ev.start - 1] == " "
            assert ev.end == len(text) or text[ev.end] == " "
            checked += 1
    assert checked > 188


def test_scifact_train_split_counts() -> None:
    es = load_beir(shared_dataset("scifact"), split="train")
    assert len(es.queries) == 809
    assert sum(len(q.relevance) for q in es.queries) == 919


def test_hotpotqa_dev500_beir_counts() -> None:
    es = load_beir(shared_dataset("hotpotqa_dev500", "beir_format"))
    assert len(es.documents) == 4858
    assert len(es.queries) == 500
    per_query = Counter(len(q.relevance) for q in es.queries)
    assert per_query == {2: 500}  # exactly two gold paragraphs per question
    docs = es.doc_map()
    assert all(d in docs for q in es.queries for d in q.relevance)
    assert all(docs[d].title == d for d in list(docs)[:100])  # _id = title = the Wikipedia title
    assert all(q.evidence == [] for q in es.queries)  # paragraph-level only: no sentence spans
