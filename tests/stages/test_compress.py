from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragopt.cache import Cache
from ragopt.config import EmbedderConfig
from ragopt.errors import InputError
from ragopt.pipeline import Pipeline, RequestState
from ragopt.stages.compress import CompressConfig, CompressPassages
from ragopt.backends.embeddings import Embedder
from ragopt.types import Chunk, Hit, Query

PREFIX = "Archive note. "  # chunks start inside their documents, so kept spans must be offset by chunk.start
DOCS = [
    ("seine", "The Seine is 777 km long. It flows through Paris into the English Channel. Barges carry freight on it. "
              "Its basin drains much of northern France."),
    ("louvre", "The Louvre opened in 1793. It is the most visited museum in the world. The museum holds the Mona Lisa. "
               "Its glass pyramid was finished in 1989."),
    ("seine-copy", "The Seine is 777 km long. It flows through Paris into the English Channel. Barges carry freight on it. "
                   "Its basin drains much of northern France!"),
    ("eiffel", "The Eiffel Tower was built for the 1889 World's Fair. It is 330 metres tall. Gustave Eiffel's company built it."),
]
WORDS = lambda text: len(text.split())  # noqa: E731 - a deterministic counter for the budget arithmetic


def hits() -> list[Hit]:
    out = []
    for i, (doc, text) in enumerate(DOCS):
        start = len(PREFIX)
        c = Chunk(id=f"c-{doc}", doc_id=doc, start=start, end=start + len(text), text=text, title=doc.title())
        out.append(Hit(chunk=c, score=1.0 - i / 10, rank=i + 1, retriever="test"))
    return out


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    return Embedder(EmbedderConfig(), Cache(tmp_path_factory.mktemp("compress-cache")))


def compress(embedder: Embedder, question: str, count=WORDS, **config) -> RequestState:
    stage = CompressPassages(CompressConfig(**config), embedder=embedder, count_tokens=count)
    return stage.run(RequestState(query=Query(text=question), hits=hits()))


def test_near_duplicate_dropped_better_ranked_kept_order_preserved(embedder):
    state = compress(embedder, "How long is the Seine?", budget=None)
    assert [h.chunk.id for h in state.hits] == ["c-seine", "c-louvre", "c-eiffel"]
    assert state.usage.attrs["duplicates_dropped"] == ["c-seine-copy"]
    assert [h.chunk.text for h in state.hits] == [DOCS[0][1], DOCS[1][1], DOCS[3][1]]  # no budget: texts untouched


def test_no_dedup_when_threshold_is_off(embedder):
    state = compress(embedder, "How long is the Seine?", budget=None, dedup_threshold=None)
    assert len(state.hits) == 4 and state.usage.attrs["duplicates_dropped"] == []


def test_budget_keeps_relevant_sentences_in_order_within_the_budget(embedder):
    state = compress(embedder, "When was the Louvre museum opened and what does it hold?", budget=0.5)
    attrs = state.usage.attrs
    assert attrs["tokens_after"] <= attrs["budget_tokens"] == int(0.5 * attrs["tokens_before"])
    assert sum(WORDS(h.chunk.text) for h in state.hits) == attrs["tokens_after"]
    assert 0 < attrs["sentences_kept"] < attrs["sentences_total"]
    louvre = next(h for h in state.hits if h.chunk.doc_id == "louvre").chunk.text
    assert "The Louvre opened in 1793." in louvre
    kept = [s for s in ("The Louvre opened in 1793.", "It is the most visited", "The museum holds", "Its glass") if s in louvre]
    assert [louvre.index(s) for s in kept] == sorted(louvre.index(s) for s in kept)  # original order


def test_hits_keep_identity_and_kept_spans_point_into_the_document(embedder):
    original = {h.chunk.id: h for h in hits()}
    state = compress(embedder, "How tall is the Eiffel Tower?", budget=0.4)
    for h in state.hits:
        before = original[h.chunk.id]
        assert (h.chunk.doc_id, h.chunk.start, h.chunk.end, h.rank) == (before.chunk.doc_id, before.chunk.start, before.chunk.end, before.rank)
        document = PREFIX + before.chunk.text
        for s, e in h.chunk.metadata["kept_spans"]:
            assert document[s:e] in h.chunk.text
    eiffel = next(h for h in state.hits if h.chunk.doc_id == "eiffel")
    assert "It is 330 metres tall." in eiffel.chunk.text


def test_best_first_gives_every_passage_its_best_sentence(embedder):
    question = "How long is the Seine river that flows through Paris?"
    best_first = compress(embedder, question, budget=0.3, scorer="bm25", best_first=True)  # BM25: the Louvre's sentences score 0
    by_score = compress(embedder, question, budget=0.3, scorer="bm25", best_first=False)
    assert all(h.chunk.text for h in best_first.hits)
    louvre = next(h for h in by_score.hits if h.chunk.doc_id == "louvre")
    assert louvre.chunk.text == ""  # by score alone the Seine's sentences take the whole budget


def test_passage_weight_ranks_sentences_by_their_passage(embedder):
    # weight 1: every sentence scores as its passage does, so the best passage's sentences come first, in order
    state = compress(embedder, "Who built the Eiffel Tower?", budget=0.12, passage_weight=1.0, best_first=False)
    assert [h.chunk.text for h in state.hits] == ["", "", "The Eiffel Tower was built for the 1889 World's Fair."]


def test_passages_never_renumbered_even_when_emptied(embedder):
    state = compress(embedder, "How long is the Seine?", budget=0.1)
    assert [h.chunk.id for h in state.hits] == ["c-seine", "c-louvre", "c-eiffel"]
    assert "777 km" in state.hits[0].chunk.text
    assert any(h.chunk.text == "" and h.chunk.metadata["kept_spans"] == [] for h in state.hits)


def test_bm25_scorer_needs_no_model():
    stage = CompressPassages(CompressConfig(budget=0.3, scorer="bm25", tokenizer="whitespace"))
    state = stage.run(RequestState(query=Query(text="Mona Lisa museum"), hits=hits()))
    assert "Mona Lisa" in state.hits[1].chunk.text
    assert "embedder" not in stage.__dict__  # the embedder was never built


def test_absolute_budget_counts_instructions_and_question(embedder):
    question = "How tall is the Eiffel Tower?"
    stage = CompressPassages(CompressConfig(budget=120), embedder=embedder, count_tokens=WORDS)
    state = stage.run(RequestState(query=Query(text=question), hits=hits()))
    passages = sum(WORDS(h.chunk.text) for h in state.hits)
    assert stage.instruction_tokens > 0
    assert state.usage.attrs["budget_tokens"] == 120 - stage.instruction_tokens - WORDS(question)
    assert stage.instruction_tokens + WORDS(question) + passages <= 120


def test_budget_below_the_instructions_is_an_input_error(embedder):
    with pytest.raises(InputError) as err:
        CompressPassages(CompressConfig(budget=20), embedder=embedder, count_tokens=WORDS)
    assert err.value.field == "budget" and "instructions" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("budget", [0, 1.5, -0.25])
def test_budget_out_of_range_is_rejected(budget):
    with pytest.raises(ValidationError):
        CompressConfig(budget=budget)


def test_runs_in_a_pipeline_with_the_real_tokenizer(embedder):
    class FixedHits:
        name = "retrieve"
        reads: tuple[str, ...] = ()
        writes = ("hits",)

        def run(self, state: RequestState) -> RequestState:
            state.hits = hits()
            return state

    result = Pipeline([FixedHits(), CompressPassages(CompressConfig(budget=0.5), embedder=embedder)]).run("Who built the Eiffel Tower?")
    span = result.trace.span("compress")
    assert span.usage.attrs["tokens_after"] <= span.usage.attrs["tokens_before"] * 0.5
    assert span.usage.cache_hits + span.usage.cache_misses > 0


ZH_DOCS = [
    ("战国无双3", "《战国无双3》是一款动作游戏。本作由光荣和ω-force合作开发。游戏于2010年在日本发售。"),
    ("战国无双3副本", "《战国无双3》是一款动作游戏。本作由光荣和ω-force合作开发。游戏于2010年在日本发售！"),
    ("上海", "上海是中国的经济中心。人口超过两千万。它位于长江入海口。"),
]


def test_chinese_passages_are_deduplicated_and_cut_at_chinese_sentence_ends():
    zh = [Hit(chunk=Chunk(id=f"z{i}", doc_id=f"z{i}", start=0, end=len(text), text=text, title=title),
              score=1.0 - i / 10, rank=i + 1, retriever="test") for i, (title, text) in enumerate(ZH_DOCS)]
    stage = CompressPassages(CompressConfig(budget=0.2, scorer="bm25", tokenizer="whitespace"))
    state = stage.run(RequestState(query=Query(text="哪两个公司合作开发了这款游戏？"), hits=zh))
    assert state.usage.attrs["duplicates_dropped"] == ["z1"]  # character trigrams: a near-copy of the first
    assert state.usage.attrs["sentences_total"] == 6
    assert state.hits[0].chunk.text == "本作由光荣和ω-force合作开发。"  # the sentence naming the developers
    assert state.usage.attrs["tokens_after"] <= state.usage.attrs["budget_tokens"]
