"""What a judge is asked: labels read strictly, and prompts that share their prefix across one answer's verdicts."""

from __future__ import annotations

import os

from ragopt.judge.verdicts import answer_requests, read_label, user_message


def test_labels_are_read_from_a_bare_word_a_json_verdict_or_the_first_word_and_nothing_else() -> None:
    assert read_label("yes") is True and read_label(" No.") is False
    assert read_label('{"verdict": "no"}') is False and read_label('{"verdict": "yes"}') is True
    assert read_label("Yes, the passage says so") is True
    for unreadable in ("", "maybe", "The answer is yes", '{"verdict": 1', '{"label": "yes"}', "[1] yes"):
        assert read_label(unreadable) is None, unreadable


def test_the_verdicts_of_one_answer_differ_only_after_the_passages_and_the_question() -> None:
    passages = ["Tides are caused by the moon.", "Waves come from wind."]
    requests = answer_requests("What causes tides?", passages, ["The moon causes tides.", "Wind makes waves."],
                               "The moon causes tides. Wind makes waves.", "the moon", ["claim", "correctness", "context"])
    assert [r.kind for r in requests] == ["claim", "claim", "correctness", "context"]
    texts = [user_message(r) for r in requests]
    shared = os.path.commonprefix(texts)
    assert shared.endswith("Question: What causes tides?\n\n")  # everything before the judged text is common
    assert all(p in shared for p in passages)
    assert "The moon causes tides." in texts[0][len(shared):] and "Reference answer: the moon" in texts[2]


def test_correctness_is_asked_only_where_there_is_a_reference() -> None:
    requests = answer_requests("q", ["p"], ["s"], "s", None, ["claim", "correctness", "context"])
    assert [r.kind for r in requests] == ["claim", "context"]
