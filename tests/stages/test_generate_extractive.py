from __future__ import annotations

from ragopt.pipeline import Pipeline, RequestState, Step
from ragopt.stages.generate_extractive import NO_CONTEXT_TEXT, ExtractiveConfig, ExtractiveGenerator
from ragopt.text import sentences
from ragopt.types import Chunk, Hit, Query

DOCS = [
    ("Germany", "Berlin is the capital of Germany. The city has about 3.7 million inhabitants. It lies on the Spree."),
    ("France", "France is a country in Western Europe. Its capital is Paris, which lies on the river Seine. Paris hosts the Louvre."),
    ("Rivers", "The Seine flows through Paris into the English Channel. It is 777 km long."),
]


def hits() -> list[Hit]:
    out = []
    for i, (title, text) in enumerate(DOCS):
        c = Chunk(id=f"c{i}", doc_id=f"doc-{title.lower()}", start=0, end=len(text), text=text, title=title)
        out.append(Hit(chunk=c, score=1.0 - i / 10, rank=i + 1, retriever="test"))
    return out


class FixedHits:
    name = "retrieve"
    reads: tuple[str, ...] = ()
    writes = ("hits",)

    def run(self, state: RequestState) -> RequestState:
        state.hits = hits()
        return state


# lexical support weighed over rank: these tests check the word matching itself (the defaults lean on rank)
WORDS_FIRST = ExtractiveConfig(max_sentences=2, lexical_weight=1.0, rank_weight=0.25)


def run(question: str, **kw) -> RequestState:
    state = RequestState(query=Query(text=question), hits=hits(), **kw)
    return ExtractiveGenerator(WORDS_FIRST).run(state)


def test_picks_the_best_matching_sentence_and_cites_it():
    state = run("What is the capital of France?")
    answer = state.answer
    assert answer.text.startswith("Its capital is Paris, which lies on the river Seine. [2]")
    assert answer.citations[0].marker == 2 and answer.citations[0].doc_id == "doc-france"
    assert all(c.valid for c in answer.citations)
    assert answer.generator == "extractive" and not answer.incomplete


def test_deterministic():
    assert run("How long is the Seine river?").answer == run("How long is the Seine river?").answer


def test_streams_its_pieces():
    pieces: list[str] = []
    state = run("Which river flows through Paris?", on_token=pieces.append)
    assert pieces and "".join(pieces) == state.answer.text


def test_no_overlap_falls_back_to_the_top_passage():
    state = run("zzz qqq")
    assert state.answer.text.endswith("[1]") and state.usage.attrs["question_overlap"] is False


def test_no_hits():
    state = ExtractiveGenerator().run(RequestState(query=Query(text="anything")))
    assert state.answer.text == NO_CONTEXT_TEXT and state.answer.finish_reason == "no_context"


def test_length_caps():
    gen = ExtractiveGenerator(ExtractiveConfig(max_sentences=1, max_chars=60))
    state = gen.run(RequestState(query=Query(text="Paris capital Seine river Louvre"), hits=hits()))
    assert len(state.answer.text) <= 60 + 6 and state.answer.text.count("[") == 1


def test_sentence_split():
    assert sentences("One. Two? Three!\nFour 3.7 million.") == ["One.", "Two?", "Three!", "Four 3.7 million."]


class Failing:
    name = "generate"
    reads = ("hits",)
    writes = ("answer",)

    def run(self, state: RequestState) -> RequestState:
        raise RuntimeError("model crashed")


def test_is_the_pipeline_fallback_when_generation_fails():
    result = Pipeline([FixedHits(), Step(Failing(), fallback=ExtractiveGenerator())]).run("What is the capital of Germany?")
    assert result.answer.generator == "extractive"
    assert "Berlin is the capital of Germany. [1]" in result.answer.text
    assert result.trace.degraded == ["generate: RuntimeError: model crashed -> extractive"]
    assert result.trace.span("generate.fallback") is not None


def test_chinese_question_gets_the_matching_chinese_sentence_cited():
    """Chinese passages are split at 。 and matched by jieba's words: the answer is the sentence that names
    the developers, cited, not the passage's first sentence."""
    docs = [("战国无双3", "《战国无双3》是一款动作游戏，于2010年发售。本作由光荣和ω-force合作开发。主角包括真田幸村。"),
            ("真三国无双", "《真三国无双》以三国时代为背景。游戏主角是赵云。")]
    zh = [Hit(chunk=Chunk(id=f"z{i}", doc_id=f"z{i}", start=0, end=len(text), text=text, title=title),
              score=1.0 - i / 10, rank=i + 1, retriever="test") for i, (title, text) in enumerate(docs)]
    state = ExtractiveGenerator(ExtractiveConfig(max_sentences=1)).run(
        RequestState(query=Query(text="《战国无双3》是由哪两个公司合作开发的？"), hits=zh))
    assert state.answer.text == "本作由光荣和ω-force合作开发。 [1]"
    assert state.usage.attrs["question_overlap"] and [c.chunk_id for c in state.answer.citations] == ["z0"]


def test_meaning_picks_the_sentence_closest_to_the_question_and_a_warm_run_embeds_nothing(tmp_path):
    """With the meaning weight alone the answer is the sentence whose embedding (role "passage") is closest to the
    question's (role "query"), whatever words they share; its vectors are cached by model and text."""
    import numpy as np

    from ragopt.backends.embeddings import Embedder
    from ragopt.cache import Cache
    from ragopt.config import EmbedderConfig

    embedder = Embedder(EmbedderConfig(), Cache(tmp_path / "cache"))
    question = "How long is the river that flows through Paris?"
    config = ExtractiveConfig(max_sentences=1, meaning_weight=1.0, lexical_weight=0.0, rank_weight=0.0, title_weight=0.0,
                              min_words=1)
    state = ExtractiveGenerator(config, embedder=embedder).run(RequestState(query=Query(text=question), hits=hits()))
    texts = [s for _, text in DOCS for s in sentences(text)]
    q = embedder.encode([question], role="query").vectors[0]
    closest = texts[int(np.argmax(embedder.encode(texts).vectors @ q))]
    assert state.answer.text.startswith(closest) and state.usage.cache_misses == len(texts) + 1

    warm = Embedder(EmbedderConfig(), Cache(tmp_path / "cache"))
    again = ExtractiveGenerator(config, embedder=warm).run(RequestState(query=Query(text=question), hits=hits()))
    assert again.answer == state.answer and again.usage.cache_misses == 0 and "model" not in warm.__dict__


def test_weights_are_knobs_with_a_range_and_the_embedder_is_part_of_the_identity():
    import pytest
    from pydantic import ValidationError

    from ragopt.config import knobs

    assert {"meaning_weight", "lexical_weight", "rank_weight", "title_weight"} <= set(knobs(ExtractiveConfig))
    for bad in (-0.1, 1.5):
        with pytest.raises(ValidationError):
            ExtractiveConfig(meaning_weight=bad)
    assert ExtractiveGenerator().identity()["embedder"] is None  # built without one: words and rank alone


def test_the_title_signal_moves_the_answer_to_the_passage_whose_title_names_the_question_s_subject():
    question = "Which city of France lies on a river?"
    rank_first = ExtractiveConfig(lexical_weight=0.25, rank_weight=0.5, title_weight=0.0)
    untitled = ExtractiveGenerator(rank_first).run(RequestState(query=Query(text=question), hits=hits())).answer
    assert [c.marker for c in untitled.citations] == [1]  # Germany's "The city has ..." and rank outweigh
    titled = ExtractiveGenerator(rank_first.model_copy(update={"title_weight": 1.0}))
    answer = titled.run(RequestState(query=Query(text=question), hits=hits())).answer
    assert [(c.marker, c.doc_id) for c in answer.citations] == [(2, "doc-france")]
    assert answer.text.startswith("Its capital is Paris, which lies on the river Seine.")


def test_passages_without_a_sentence_leave_meaning_nothing_to_compare_and_cite_nothing(tmp_path):
    """Found on HotpotQA: every top passage's text empty. The meaning signal used to multiply an empty matrix."""
    from ragopt.backends.embeddings import Embedder
    from ragopt.cache import Cache
    from ragopt.config import EmbedderConfig

    empty = [Hit(chunk=Chunk(id=f"e{i}", doc_id=f"doc-{i}", start=0, end=0, text="", title=f"Title {i}"),
                 score=1.0, rank=i + 1, retriever="test") for i in range(2)]
    answerer = ExtractiveGenerator(ExtractiveConfig(meaning_weight=1.0), embedder=Embedder(EmbedderConfig(), Cache(tmp_path)))
    answer = answerer.run(RequestState(query=Query(text="Who wrote it?"), hits=empty)).answer
    assert answer.text == "" and answer.citations == []


def test_a_request_s_stop_and_max_tokens_cut_the_answer_and_its_stream():
    from ragopt.types import Sampling

    whole = run("What is the capital of France?").answer
    pieces: list[str] = []
    stopped = run("What is the capital of France?", sampling=Sampling(stop=("Seine",)), on_token=pieces.append).answer
    assert stopped.text == whole.text[: whole.text.index("Seine")].rstrip() and stopped.finish_reason == "stop"
    assert "".join(pieces) == stopped.text and not stopped.citations  # the [2] after the stop is gone
    pieces.clear()
    short = run("What is the capital of France?", sampling=Sampling(max_tokens=3), on_token=pieces.append).answer
    assert short.text == "Its capital is" and short.finish_reason == "length" and "".join(pieces) == short.text


def test_max_tokens_counts_each_han_character_as_a_word():
    from ragopt.stages.generate_extractive import within
    from ragopt.types import Sampling

    assert within("长城很长 [1]", Sampling(max_tokens=3)) == ("长城很", "length")
    assert within("The wall is long.", Sampling(max_tokens=9)) == ("The wall is long.", "stop")


def test_sampling_beyond_a_deterministic_answer_is_refused_by_name():
    import pytest

    from ragopt.errors import BadRequest
    from ragopt.types import Sampling

    ExtractiveGenerator.check_sampling(Sampling(max_tokens=5, stop=("x",), temperature=0, top_p=1, seed=3))
    for field, value in (("temperature", 0.7), ("top_p", 0.5), ("presence_penalty", 1.0), ("logit_bias", ((5, 1.0),))):
        with pytest.raises(BadRequest) as exc:
            ExtractiveGenerator.check_sampling(Sampling(**{field: value}))
        assert exc.value.field == field and exc.value.code == "unsupported_value"
