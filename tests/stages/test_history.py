"""History summarization: recent turns verbatim, older ones in a summary that keeps constraints within its
budget, long-lived across re-summarizations, with sensitive fields redacted; LLM mode on the tiny GGUF."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.config import validate
from ragopt.errors import InputError
from ragopt.pipeline import Pipeline
from ragopt.stages.generate_llama import GeneratorConfig
from ragopt.stages.history import (
    REDACTED,
    SUMMARY_HEADER,
    HistoryConfig,
    SummarizeHistory,
    is_summary,
    parse_summary,
    redaction_pattern,
)
from ragopt.types import Query, Turn

CONSTRAINT = "Only use data from the ops scope and never show patient names."
PATIENT = "P482913"


def conversation_turn(i: int) -> list[Turn]:
    """Turn pair i (1-based) of a data-team conversation: a goal, a constraint and a patient id early on."""
    if i == 1:
        user = f"I need to audit the lab feeds for the quality report. {CONSTRAINT}"
    elif i == 2:
        user = f"Do not share the results of patient id {PATIENT} outside the team."
    elif i == 3:
        user = "Remind me later to send the summary to the data office."
    else:
        user = f"What is the schedule of job number {i} and which table does it write to?"
    answer = f"Job {i} runs every {i} minutes and writes to table t{i} [1]. It is owned by team {i % 3}."
    return [Turn(role="user", content=user), Turn(role="assistant", content=answer)]


def summarize(history: list[Turn], **config: object) -> tuple[list[Turn], dict]:
    stage = SummarizeHistory(HistoryConfig(**config))
    state = Pipeline([stage]).run(Query(text="and now?", tenant="north", scopes=("ops",), history=history)).state
    assert (state.query.tenant, state.query.scopes, state.query.text) == ("north", ("ops",), "and now?")
    return state.query.history, state.usage.attrs


def summary_of(history: list[Turn]) -> str:
    assert is_summary(history[0])
    return history[0].content


def test_twenty_turns_stay_in_budget_keep_turn_one_constraint_and_never_show_a_redacted_field():
    config = {"keep_turns": 4, "summary_tokens": 80, "redact": ("patient_id",)}
    history: list[Turn] = []
    seen = []
    for i in range(1, 21):  # a client that sends back the history it was given, plus the new turn pair
        history, attrs = summarize(history + conversation_turn(i), **config)
        if i >= 3:
            text = summary_of(history)
            seen.append(text)
            assert len(text.split()) == attrs["summary_tokens"] <= 80
            assert len(history) == 1 + 4  # the summary and the last four turns
            assert CONSTRAINT in text
            assert PATIENT not in text
            if i >= 4:  # turn pair 2 has left the verbatim window: its constraint is summarized, its id redacted
                assert f"Constraint: Do not share the results of patient id {REDACTED} outside the team." in text
    assert all(PATIENT not in s for s in seen)
    final = parse_summary(seen[-1])
    assert final.items["constraint"] == [CONSTRAINT, f"Do not share the results of patient id {REDACTED} outside the team."]
    assert final.items["goal"] == ["I need to audit the lab feeds for the quality report."]
    assert final.items["task"] == ["Remind me later to send the summary to the data office."]
    assert final.items["fact"] == ["Job 18 runs every 18 minutes and writes to table t18 [1]."]  # the newest fact fills what is left
    assert history[1:] == conversation_turn(19) + conversation_turn(20)


def test_whole_history_at_once_gives_the_same_kind_of_summary():
    history = [t for i in range(1, 21) for t in conversation_turn(i)]
    out, attrs = summarize(history, keep_turns=2, summary_tokens=80, redact=(r"\bP\d{6}\b",))
    text = summary_of(out)
    assert out[1:] == history[-2:] and attrs["summarized_turns"] == 38
    assert CONSTRAINT in text and PATIENT not in text and attrs["redactions"] == 1
    assert len(text.split()) <= 80 and text.startswith(SUMMARY_HEADER)


def test_short_history_is_left_alone():
    history = conversation_turn(1)
    out, attrs = summarize(history, keep_turns=4)
    assert out == history and attrs["summarized_turns"] == 0


def test_the_token_counter_given_decides_the_budget():
    def chars(text: str) -> int:
        return len(text)

    stage = SummarizeHistory(HistoryConfig(keep_turns=0, summary_tokens=120), count_tokens=chars)
    history = [t for i in range(1, 6) for t in conversation_turn(i)]
    state = Pipeline([stage]).run(Query(text="q", history=history)).state
    (summary,) = state.query.history
    assert len(summary.content) <= 120 and state.usage.attrs["summary_tokens"] == len(summary.content)
    assert summary.content == f"{SUMMARY_HEADER}\nConstraint: {CONSTRAINT}"  # the highest priority that fits


def test_redaction_by_field_name_matches_spellings_and_by_regex_every_match():
    pattern, replacement = redaction_pattern("patient_id")
    text = "Patient-ID: P1, patient id P2. patient_id=P3 and patientid P4"
    assert pattern.sub(replacement, text) == f"Patient-ID: {REDACTED}, patient id {REDACTED}. patient_id={REDACTED} and patientid {REDACTED}"
    pattern, replacement = redaction_pattern(r"\bMRN-\d+\b")
    assert pattern.sub(replacement, "MRN-12 and MRN-345") == f"{REDACTED} and {REDACTED}"


def test_a_bad_redact_regex_is_an_input_error_naming_the_key():
    with pytest.raises(InputError) as info:
        validate(HistoryConfig, {"redact": ["(unclosed"]}, "pipeline.toml")
    assert info.value.field == "redact" and "not a valid regular expression" in str(info.value)


def test_llm_mode_runs_on_the_tiny_model_and_redaction_still_holds(tiny_gguf: Path):
    pytest.importorskip("llama_cpp")
    config = HistoryConfig(keep_turns=2, summary_tokens=50, mode="llm", redact=("patient_id",),
                           llm=GeneratorConfig(model=str(tiny_gguf), n_ctx=1024, max_tokens=24))
    history = [t for i in range(1, 7) for t in conversation_turn(i)]
    state = Pipeline([SummarizeHistory(config)]).run(Query(text="q", tenant="north", history=history)).state
    text = summary_of(state.query.history)
    assert 0 < state.usage.tokens_out <= 24 and state.usage.tokens_in > 0
    assert len(text.split()) <= 50 and CONSTRAINT in text and PATIENT not in text


def test_chinese_turns_split_into_sentences_and_fit_the_budget_in_characters():
    """Chinese answers are cut at 。！？ (each cited sentence a fact of its own) and counted one Han character
    per token by default, so a budget holds a Chinese summary as it holds an English one."""
    history = [
        Turn(role="user", content="战国无双3是谁开发的？"),
        Turn(role="assistant", content="它由光荣和ω-force合作开发[1]。游戏于2010年发售[2]！这是第三部作品。"),
        Turn(role="user", content="有几个故事？"),
        Turn(role="assistant", content="本作以三大故事为主轴[1]。"),
    ]
    out, attrs = summarize(history, keep_turns=0, summary_tokens=200)
    lines = summary_of(out).splitlines()[1:]
    facts = [line for line in lines if line.startswith("Fact: ")]
    assert facts == ["Fact: 本作以三大故事为主轴[1]。", "Fact: 游戏于2010年发售[2]！", "Fact: 它由光荣和ω-force合作开发[1]。"]  # newest first
    short, _ = summarize(history, keep_turns=0, summary_tokens=20)
    assert 0 < len(short[0].content.split("\n", 1)[1]) < len(summary_of(out).split("\n", 1)[1])
