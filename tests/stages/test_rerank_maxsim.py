"""Sentence-level max-sim rerank with the real MiniLM: a passage whose one sentence answers the query rises;
sentence vectors come from the embedding cache on the second request; depth 0 passes through. (Fusion with
the fused order is `reorder`, tested in test_rerank.py.)"""

from __future__ import annotations

from ragopt.cache import Cache
from ragopt.config import EmbedderConfig
from ragopt.pipeline import Pipeline, RequestState
from ragopt.backends.embeddings import Embedder
from ragopt.stages.rerank_maxsim import MaxSimConfig, MaxSimRerank, passage_sentences
from ragopt.types import Chunk, Hit, Query

LONG = (
    "The colony is organised around foraging. Workers fly several kilometres for nectar. "
    "Wax combs store the honey through winter. The queen lays all the eggs of the hive."
)
OTHERS = [
    "Bread rises because yeast ferments sugars in the dough.",
    "Tides follow the pull of the moon on the oceans.",
    "A vaccine teaches the immune system to recognise a pathogen.",
]


def hits_of(texts: list[str], title: str = "") -> list[Hit]:
    return [
        Hit(chunk=Chunk(id=f"c{i}", doc_id=f"d{i}", start=0, end=len(t), text=t, title=title), score=1.0 / (i + 1), rank=i + 1, retriever="rrf")
        for i, t in enumerate(texts)
    ]


def run(stage: MaxSimRerank, hits: list[Hit], query: str) -> RequestState:
    return Pipeline([stage], inputs=("query", "hits")).run_state(RequestState(query=Query(text=query), hits=hits)).state


def test_the_passage_with_the_answering_sentence_rises_and_vectors_are_cached() -> None:
    embedder = Embedder(EmbedderConfig(), Cache(None))
    stage = MaxSimRerank(embedder, MaxSimConfig(depth=4, fusion="none"))
    hits = hits_of([*OTHERS, LONG])  # the answer is fused last
    state = run(stage, hits, "Who lays the eggs in a bee hive?")
    assert state.hits[0].chunk.id == "c3"
    assert state.usage.attrs["scored"] == 4 and state.usage.attrs["order_before"] == ["c0", "c1", "c2", "c3"]
    again = run(stage, hits_of([*OTHERS, LONG]), "Who lays the eggs in a bee hive?")
    assert again.usage.cache_misses == 0 and again.usage.cache_hits == 1 + sum(len(passage_sentences(h.chunk)) for h in hits)


def test_titles_count_as_a_sentence_and_depth_zero_passes_through() -> None:
    chunk = hits_of(["First one. Second one."], title="A title")[0].chunk
    assert passage_sentences(chunk) == ["A title", "First one.", "Second one."]
    hits = hits_of(OTHERS)
    state = run(MaxSimRerank(Embedder(EmbedderConfig(), Cache(None)), MaxSimConfig()), hits, "tides")
    assert state.hits == hits and state.usage.attrs["scored"] == 0
