from __future__ import annotations

from ragopt.pipeline import Pipeline, RequestState
from ragopt.stages.attribute import AttributeCitations, AttributeConfig
from ragopt.stages.generate_extractive import ExtractiveGenerator
from ragopt.stages.prompt import PromptConfig, WordRenderer, fit_prompt, prompt_parts
from ragopt.types import Answer, Chunk, Hit, Query

DOCS = [
    ("LAB_GLU_FAST", "Field: LAB_GLU_FAST. Unit: mmol/L. Meaning: fasting plasma glucose after 8 hours without food."),
    ("LAB_HBA1C", "Field: LAB_HBA1C. Unit: mmol/mol. Meaning: glycated haemoglobin, the three month average."),
    ("Release notes", "Version 4 of the HelixLab dictionary renamed two glucose fields and retired LAB_GLU_OLD."),
]


def hits() -> list[Hit]:
    out = []
    for i, (title, text) in enumerate(DOCS):
        c = Chunk(id=f"c{i + 1}", doc_id=f"d{i + 1}", start=0, end=len(text), text=text, title=title)
        out.append(Hit(chunk=c, score=1.0 - i / 10, rank=i + 1, retriever="test"))
    return out


def attribute(answer_text: str, **config) -> RequestState:
    state = RequestState(query=Query(text="q"), hits=hits(), answer=Answer(text=answer_text, generator="llama:test"))
    return AttributeCitations(AttributeConfig(**config)).run(state)


def test_adds_the_supporting_passage_to_each_sentence():
    state = attribute("Glycated haemoglobin is stored in mmol/mol. Fasting glucose is measured in mmol/L.")
    assert state.answer.text == "Glycated haemoglobin is stored in mmol/mol [2]. Fasting glucose is measured in mmol/L [1]."
    assert [(c.marker, c.chunk_id, c.valid) for c in state.answer.citations] == [(2, "c2", True), (1, "c1", True)]
    assert state.usage.attrs["added"] == 2 and state.usage.attrs["model_citations"] == []
    assert state.answer.generator == "llama:test"  # the rest of the answer is kept


def test_invalid_marker_is_repaired_and_reported():
    state = attribute("Version 4 retired LAB_GLU_OLD [7].")
    assert state.answer.text == "Version 4 retired LAB_GLU_OLD [3]."
    assert state.usage.attrs["model_invalid"] == [7] and state.usage.attrs["repaired"] == 1
    assert all(c.valid for c in state.answer.citations)


def test_replace_mode_overrides_a_wrong_citation_but_the_trace_keeps_it():
    state = attribute("Fasting glucose after 8 hours is in mmol/L [2].")
    assert state.answer.text == "Fasting glucose after 8 hours is in mmol/L [1]."
    assert state.usage.attrs["model_citations"] == [2] and state.usage.attrs["replaced"] == 1


def test_repair_mode_keeps_the_models_valid_citation():
    state = attribute("Fasting glucose after 8 hours is in mmol/L [2]. Version 4 retired LAB_GLU_OLD.", mode="repair")
    assert state.answer.text == "Fasting glucose after 8 hours is in mmol/L [2]. Version 4 retired LAB_GLU_OLD [3]."
    assert state.usage.attrs["replaced"] == 0 and state.usage.attrs["added"] == 1


def test_unsupported_sentence_cites_nothing():
    state = attribute("I cannot answer that from the sources [1].")
    assert state.answer.text == "I cannot answer that from the sources."
    assert state.answer.citations == []


def test_marker_after_the_full_stop_belongs_to_the_sentence_before():
    state = attribute("The unit is mmol/mol for glycated haemoglobin. [9] Version 4 retired LAB_GLU_OLD.")
    assert state.answer.text == "The unit is mmol/mol for glycated haemoglobin [2]. Version 4 retired LAB_GLU_OLD [3]."
    assert state.usage.attrs["repaired"] == 1 and state.usage.attrs["added"] == 1


def test_numbers_come_from_the_fitted_prompt_when_a_prompt_stage_left_one():
    query = Query(text="What did version 4 retire?")
    parts = prompt_parts(query, hits(), PromptConfig())
    full = fit_prompt(parts, WordRenderer(), 10_000).n_tokens
    fitted = fit_prompt(parts, WordRenderer(), full - 5)  # the budget drops passage 3
    assert len(fitted.passages) == 2
    state = RequestState(query=query, hits=hits(), prompt=fitted, answer=Answer(text="Version 4 retired LAB_GLU_OLD."))
    state = AttributeCitations(AttributeConfig(min_support=0.0)).run(state)
    assert all(c.marker in (1, 2) for c in state.answer.citations)  # passage 3 was never shown to the model


def test_after_a_generator_in_a_pipeline():
    class FixedHits:
        name = "retrieve"
        reads: tuple[str, ...] = ()
        writes = ("hits",)

        def run(self, state: RequestState) -> RequestState:
            state.hits = hits()
            return state

    result = Pipeline([FixedHits(), ExtractiveGenerator(), AttributeCitations()]).run("What unit does LAB_HBA1C use?")
    assert result.answer.citations and all(c.valid for c in result.answer.citations)
    assert result.trace.span("attribute").usage.attrs["model_citations"]


def test_a_rank_margin_prefers_the_better_ranked_passage_only_within_the_margin():
    from ragopt.stages.attribute import choose_passage

    support = {1: 0.5, 2: 0.6, 3: 0.1}
    assert choose_passage(support, 0.2, 0.0) == 2  # the best support alone
    assert choose_passage(support, 0.2, 0.15) == 1  # within the margin: the better-ranked passage
    assert choose_passage({1: 0.3, 2: 0.6}, 0.2, 0.15) == 2  # beyond it: the better-supported one
    assert choose_passage({1: 0.1, 2: 0.6}, 0.2, 1.0) == 2  # a passage below min_support is never cited
    assert choose_passage({1: 0.1, 2: 0.15}, 0.2, 1.0) is None
    assert choose_passage({1: 0.4, 2: 0.4}, 0.2, 0.0) == 1  # ties: the better-ranked


def test_rank_margin_changes_the_citation_in_the_stage():
    text = "Glucose fields were renamed in version 4 of the dictionary, fasting in mmol/L."
    plain = attribute(text).answer.citations
    assert [c.marker for c in plain] == [3]
    assert [c.marker for c in attribute(text, rank_margin=1.0).answer.citations] == [1]


def test_answer_mode_cites_the_passage_supporting_the_whole_answer_once_at_the_end():
    text = "Fasting glucose is measured after 8 hours [3]. It is stored in mmol/L. Version 4 renamed it."
    state = attribute(text, mode="answer")
    assert state.answer.text == "Fasting glucose is measured after 8 hours. It is stored in mmol/L. Version 4 renamed it [1]."
    assert [c.marker for c in state.answer.citations] == [1]
    assert state.usage.attrs["model_citations"] == [3] and state.usage.attrs["replaced"] == 1
    # sentence by sentence, the last sentence alone would have cited the release notes
    assert [c.marker for c in attribute(text).answer.citations][-1] == 3


ZH_DOCS = [
    ("战国无双3", "《战国无双3》是由光荣和ω-force开发的动作游戏。本作于2010年发售。"),
    ("真三国无双", "《真三国无双》以三国时代为背景，由光荣出品。游戏主角是赵云。"),
]


def zh_hits() -> list[Hit]:
    return [Hit(chunk=Chunk(id=f"z{i + 1}", doc_id=f"z{i + 1}", start=0, end=len(text), text=text, title=title),
                score=1.0 - i / 10, rank=i + 1, retriever="test") for i, (title, text) in enumerate(ZH_DOCS)]


def test_chinese_answer_sentences_each_cite_their_passage():
    """Sentences end at 。, words are jieba's: each Chinese sentence cites the passage it comes from, the
    marker before the full stop, without a second English-only tokenizer."""
    text = "该游戏由光荣和ω-force开发。真三国无双的主角是赵云。"
    state = RequestState(query=Query(text="q"), hits=zh_hits(), answer=Answer(text=text, generator="llama:test"))
    answer = AttributeCitations(AttributeConfig()).run(state).answer
    assert answer.text == "该游戏由光荣和ω-force开发 [1]。真三国无双的主角是赵云 [2]。"
    assert [c.chunk_id for c in answer.citations] == ["z1", "z2"]
