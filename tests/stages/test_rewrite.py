"""Query rewrite: normalization, glossary, follow-up resolution by rules and by the LLM (tiny GGUF), caching,
multi-query retrieval fused with RRF, and bad glossary input."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.cache import Cache
from ragopt.errors import InputError
from ragopt.resources import Resources
from ragopt.pipeline import Pipeline, RequestState
from ragopt.stages.generate_llama import GeneratorConfig
from ragopt.stages.multi_query import MultiQueryRetrieve, fuse
from ragopt.stages.rewrite import (
    QueryRewrite,
    RewriteConfig,
    entities,
    expand_glossary,
    follow_up_rule,
    load_glossary,
    normalize,
    with_rewrite,
)
from ragopt.types import Chunk, Hit, Query, Turn

JOB_HISTORY = [
    Turn(role="user", content="Which job loads LAB_NA into the warehouse?"),
    Turn(role="assistant", content="lab_chem_ingest loads it into ndw.lab_result_chem [1]."),
]
UNIT_HISTORY = [Turn(role="user", content="What unit is LAB_HBA1C in?"), Turn(role="assistant", content="mmol/mol [1].")]


def rewrite(text: str, history: list[Turn] | None = None, **config: object) -> RequestState:
    stage = QueryRewrite(RewriteConfig(**config))
    query = Query(text=text, tenant="north", scopes=("ops",), history=history or [])
    return Pipeline([stage]).run(query).state


def test_normalization_fixes_spacing_punctuation_and_shouting_but_keeps_identifiers_and_symbols():
    assert normalize("  what  is the unit  of LAB_K ??") == "what is the unit of LAB_K?"
    assert normalize("WHAT IS THE UNIT OF LAB_K") == "What is the unit of LAB_K"
    assert normalize("Range in \u201cmL/min/1.73 m\u00b2\u201d or \u00b5mol/L ?") == 'Range in "mL/min/1.73 m\u00b2" or \u00b5mol/L?'


def test_entities_prefer_identifiers_and_skip_sentence_starts():
    assert entities("Which job loads LAB_TROP_HS into the warehouse?") == ["LAB_TROP_HS"]
    assert entities("lab_chem_ingest loads it into ndw.lab_result_chem [1].") == ["lab_chem_ingest", "ndw.lab_result_chem"]
    assert entities("Tell me about the Eiffel Tower.") == ["Eiffel Tower"]
    assert entities("How often does it run?") == []


def test_follow_up_needs_history_and_a_dependent_question():
    assert follow_up_rule("How often does it run?", []) is None
    assert follow_up_rule("How often does it run?", JOB_HISTORY) == "pronoun"
    assert follow_up_rule("And what is its valid range?", UNIT_HISTORY) == "pronoun"
    assert follow_up_rule("What about LAB_K?", UNIT_HISTORY) == "ellipsis"
    assert follow_up_rule("Why?", UNIT_HISTORY) == "short"
    # a question that names its own subject stands alone, even mid-conversation ("that" is a relativizer here)
    assert follow_up_rule("Which job loads LAB_K that runs hourly?", JOB_HISTORY) is None


def test_rules_resolve_pronouns_with_the_user_entity_and_keep_the_answer_as_context():
    state = rewrite("How often does it run?", JOB_HISTORY)
    assert state.query.text == "How often does LAB_NA run? (about lab_chem_ingest, ndw.lab_result_chem)"
    assert state.usage.attrs == {"original_query": "How often does it run?", "rewritten_query": state.query.text,
                                 "rewrite": "pronoun"}
    assert rewrite("And what is its valid range?", UNIT_HISTORY).query.text == "And what is LAB_HBA1C's valid range?"


def test_rules_resolve_ellipsis_and_short_follow_ups():
    assert rewrite("What about LAB_K?", UNIT_HISTORY).query.text == "What unit is LAB_K in?"
    assert rewrite("And the range?", UNIT_HISTORY).query.text == "And the range? (about LAB_HBA1C)"
    nothing_named = [Turn(role="user", content="what does the warehouse hold?"), Turn(role="assistant", content="tables")]
    assert rewrite("why?", nothing_named).query.text == "why? (after: what does the warehouse hold?)"


def test_ordinary_questions_are_left_alone_and_permissions_never_change():
    state = rewrite("In which unit is LAB_CREAT stored?", JOB_HISTORY)
    assert state.query.text == "In which unit is LAB_CREAT stored?"
    assert state.usage.attrs["rewrite"] == "none"
    assert (state.query.tenant, state.query.scopes, state.query.history) == ("north", ("ops",), JOB_HISTORY)
    off = rewrite("  How often does  it run?", JOB_HISTORY, mode="off")
    assert off.query.text == "  How often does  it run?" and off.usage.attrs["rewrite"] == "off"


def test_glossary_expands_whole_words_once_and_not_when_already_spelled_out():
    glossary = {"ICU": "intensive care unit", "LOS": "length of stay"}
    assert expand_glossary("average icu los for sepsis", glossary) == (
        "average icu (intensive care unit) los (length of stay) for sepsis", True)
    assert expand_glossary("intensive care unit (ICU) beds", glossary) == ("intensive care unit (ICU) beds", False)
    assert expand_glossary("ICUs and LOSS", glossary) == ("ICUs and LOSS", False)
    state = rewrite("beds  in the ICU", glossary=glossary)
    assert state.query.text == "beds in the ICU (intensive care unit)" and state.usage.attrs["rewrite"] == "normalize+glossary"
    state = rewrite("What about the ICU?", UNIT_HISTORY, glossary=glossary)  # resolved first, then expanded
    assert state.query.text == "What unit is ICU (intensive care unit) in?" and state.usage.attrs["rewrite"] == "ellipsis+glossary"


def test_glossary_matches_words_in_chinese_text():
    """Whole words as the Chinese analyzer segments them: Latin abbreviations between Han characters match, and
    a Chinese abbreviation inside a longer word (search mode) too; a word that merely contains it does not."""
    glossary = {"ICU": "重症监护室", "医保": "医疗保险"}
    assert expand_glossary("请问ICU在几楼", glossary) == ("请问ICU (重症监护室)在几楼", True)
    assert expand_glossary("医保卡在哪里办理", glossary) == ("医保 (医疗保险)卡在哪里办理", True)
    assert expand_glossary("重症监护室ICU", glossary) == ("重症监护室ICU", False)  # already spelled out
    assert expand_glossary("ICUS和LOSS", {"ICU": "x"}) == ("ICUS和LOSS", False)
    assert expand_glossary("C++ 与 .NET", {"C++": "a language", "NET": "x"}) == ("C++ (a language) 与 .NET", True)


def test_glossary_files(tmp_path: Path):
    text = tmp_path / "glossary.txt"
    text.write_text("# hospital terms\nICU = intensive care unit\n\nMRN = medical record number\n", encoding="utf-8")
    as_json = tmp_path / "glossary.json"
    as_json.write_text('{"ICU": "intensive care unit"}', encoding="utf-8")
    assert load_glossary(text) == {"ICU": "intensive care unit", "MRN": "medical record number"}
    assert load_glossary(str(as_json)) == {"ICU": "intensive care unit"}


@pytest.mark.parametrize("name, content, message", [
    ("empty.txt", "", "the glossary is empty"),
    ("comments.txt", "# nothing yet\n\n", "the glossary is empty"),
    ("empty.json", "{}", "the glossary is empty"),
    ("bad.txt", "ICU = intensive care unit\nLOS\n", "expected `ABBR = expansion`"),
])
def test_bad_glossary_file_is_one_line_naming_the_file(tmp_path: Path, name: str, content: str, message: str):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as info:
        QueryRewrite(RewriteConfig(glossary=str(path)))
    err = str(info.value)
    assert str(path) in err and message in err and info.value.field == "glossary" and "\n" not in err
    with pytest.raises(InputError, match="not found"):
        QueryRewrite(RewriteConfig(glossary=str(tmp_path / "missing.txt")))


def hit(chunk_id: str, rank: int) -> Hit:
    chunk = Chunk(id=chunk_id, doc_id=f"d-{chunk_id}", start=0, end=1, text=chunk_id)
    return Hit(chunk=chunk, score=1.0 / rank, rank=rank, retriever="t")


def test_fuse_is_rrf_with_ties_broken_by_chunk_id():
    a = [hit("x", 1), hit("b", 2), hit("c", 3)]
    b = [hit("y", 1), hit("c", 2), hit("a", 3)]
    fused = fuse([a, b], rrf_k=60)
    assert [h.chunk.id for h in fused] == ["c", "x", "y", "b", "a"][:3]  # as long as the longest list
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 63)
    assert [h.rank for h in fused] == [1, 2, 3]
    assert [h.chunk.id for h in fuse([b, a], rrf_k=60, k=5)] == ["c", "x", "y", "b", "a"]  # x and y tie: by id
    assert fuse([a]) == a


def test_multi_query_retrieves_per_variant_and_keeps_permissions(tiny_index):
    from ragopt.config import RetrievalConfig
    from ragopt.plan import retrieval_stages

    index, embedder = tiny_index
    retrieval = retrieval_stages(index, embedder, RetrievalConfig(retriever="hybrid", top_k=3))
    rewriter = QueryRewrite(RewriteConfig(mode="multi"))
    stages = with_rewrite(rewriter, retrieval)
    assert len(stages) == 1 and isinstance(stages[0], MultiQueryRetrieve)
    history = [Turn(role="user", content="What is the Sicilian Defence?"), Turn(role="assistant", content="A chess opening [1].")]
    query = Query(text="who answers with it ?", history=history)
    state = Pipeline(stages).run(query).state
    attrs = state.usage.attrs
    assert attrs["original_query"] == "who answers with it ?"
    assert attrs["rewritten_query"] == state.query.text == "who answers with Sicilian Defence?"
    assert attrs["query_variants"] == [state.query.text, "What is the Sicilian Defence? who answers with it?"]
    assert len(attrs["variant_ms"]) == 2 and state.hits[0].chunk.doc_id == "d8"
    assert 0 < len(state.hits) <= 3 and state.query_vector is not None
    assert state.query.tenant is None and state.query.history == history
    # the same as fusing what each variant retrieves on its own
    single = [Pipeline(retrieval).run(query.model_copy(update={"text": v})).hits for v in attrs["query_variants"]]
    assert [h.chunk.id for h in state.hits] == [h.chunk.id for h in fuse(single)]
    assert with_rewrite(QueryRewrite(RewriteConfig(mode="off")), retrieval) == retrieval
    assert with_rewrite(rewriter := QueryRewrite(), retrieval) == [rewriter, *retrieval]


def test_llm_mode_lets_the_model_pick_the_referent_among_names_and_caches_it(tiny_gguf: Path):
    pytest.importorskip("llama_cpp")
    from ragopt.stages.generate_llama import get_engine

    config = RewriteConfig(mode="llm", llm=GeneratorConfig(model=str(tiny_gguf), n_ctx=1024, max_tokens=48))
    resources = Resources()
    stage = QueryRewrite(config, cache=Cache(None), resources=resources)
    query = Query(text="How often does it run?", tenant="north", scopes=("ops",), history=JOB_HISTORY)
    first = Pipeline([stage]).run(query).state
    attrs = first.usage.attrs
    # the grammar holds even random weights to a name from the conversation, which then fills the slot
    assert attrs["rewrite"] == "pronoun:llm" and "llm_rejected" not in attrs
    assert attrs["llm_referent"] in ("LAB_NA", "lab_chem_ingest", "ndw.lab_result_chem")
    assert first.query.text.startswith(f"How often does {attrs['llm_referent']} run?")
    assert first.usage.tokens_out > 0 and first.usage.tokens_in > 20 and first.usage.cache_misses == 1
    assert get_engine(config.llm, resources).owner == ("north", ("ops",))  # the live KV now holds this tenant's tokens, and says so
    again = Pipeline([stage]).run(query).state
    assert again.usage.cache_hits == 1 and again.usage.tokens_out == 0 and again.query.text == first.query.text
    other = Pipeline([stage]).run(query.model_copy(update={"tenant": "south"})).state
    assert other.usage.cache_misses == 1  # another tenant never reads this tenant's cached answer
    # no follow-up, or only one name to choose from: no LLM call
    plain = Pipeline([stage]).run(Query(text="In which unit is LAB_CREAT stored?", history=JOB_HISTORY)).state
    assert plain.usage.tokens_in == 0 and plain.usage.attrs["rewrite"] == "none"
    single = Pipeline([stage]).run(Query(text="And its range?", history=UNIT_HISTORY)).state
    assert single.usage.tokens_in == 0 and single.query.text == "And LAB_HBA1C's range?"


def test_llm_mode_with_a_missing_model_fails_before_any_request(tmp_path: Path):
    with pytest.raises(InputError, match="model file not found"):
        QueryRewrite(RewriteConfig(mode="llm", llm=GeneratorConfig(model=str(tmp_path / "nope.gguf"))))


def test_llm_mode_falls_back_on_an_oversized_prompt_but_never_swallows_an_input_error(tiny_gguf: Path, monkeypatch):
    pytest.importorskip("llama_cpp")
    import ragopt.stages.llm_text as llm_text

    query = Query(text="How often does it run?", tenant="north", history=JOB_HISTORY)
    small = RewriteConfig(mode="llm", llm=GeneratorConfig(model=str(tiny_gguf), n_ctx=64, max_tokens=48))
    state = Pipeline([QueryRewrite(small, resources=Resources())]).run(query).state
    assert state.usage.attrs["llm_rejected"].startswith("ContextOverflow:")  # the rules answered instead
    assert state.query.text.startswith("How often does")

    def bad_input(*args, **kwargs):  # an injected fault: input found bad while the LLM was asked
        raise InputError("a bad value", field="--something")

    monkeypatch.setattr(llm_text, "complete", bad_input)
    config = RewriteConfig(mode="llm", llm=GeneratorConfig(model=str(tiny_gguf), n_ctx=1024, max_tokens=48))
    with pytest.raises(InputError, match="a bad value"):
        QueryRewrite(config, resources=Resources()).rewrite(query)
