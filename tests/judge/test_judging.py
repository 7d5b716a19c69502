"""Answers into judged metrics through the verdict cache: the support baseline's verdicts, faithfulness as the
supported share, re-runs that make no call, the call budget, and unreadable verdicts kept out of every score."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.cache import Cache
from ragopt.errors import InputError
from ragopt.judge.judges import JudgeConfig, LlamaJudge, SupportJudge
from ragopt.judge.judging import JudgeItem, answer_sentences, judge_items
from ragopt.resources import Resources

PASSAGES = ("The Eiffel Tower is in Paris and opened in 1889.", "Gustave Eiffel's company built the tower.")
ITEM = JudgeItem(id="q1", question="Where is the Eiffel Tower?", passages=PASSAGES,
                 answer="The Eiffel Tower is in Paris [1]. Penguins live in Antarctica colonies.",
                 reference="Paris")


def test_sentences_lose_their_markers_and_a_lone_marker_is_no_sentence() -> None:
    assert answer_sentences("It opened in 1889 [1]. [2]. Eiffel built it [2].") == ["It opened in 1889.", "Eiffel built it."]


def test_the_support_judge_finds_the_unsupported_sentence_and_keeps_it(tmp_path: Path) -> None:
    judged, totals = judge_items([ITEM], SupportJudge(JudgeConfig(kind="support")), Cache(tmp_path / "c"))
    j = judged[0]
    assert [s.supported for s in j.sentences] == [True, False]
    assert j.faithfulness == 0.5 and j.unsupported == ["Penguins live in Antarctica colonies."]
    assert j.answer_correctness == 1.0 and j.context_relevance == 1.0
    assert totals.calls == 4 and totals.cached == 0 and totals.failures == 0


def test_an_unchanged_rerun_is_served_from_the_cache_and_the_budget_counts_only_new_calls(tmp_path: Path) -> None:
    judge = SupportJudge(JudgeConfig(kind="support"))
    cache = Cache(tmp_path / "c")
    first, _ = judge_items([ITEM], judge, cache)
    again, totals = judge_items([ITEM], judge, cache, max_calls=0)
    assert totals.calls == 0 and totals.cached == 4 and again[0].faithfulness == first[0].faithfulness
    changed = JudgeItem(**{**ITEM.__dict__, "answer": ITEM.answer + " It opened in 1889."})
    with pytest.raises(InputError, match=r"2 new judge calls needed \(3 cached\)") as exc:  # the sentence, correctness
        judge_items([changed], judge, cache, max_calls=0)
    assert exc.value.field == "--judge-max-calls"


def test_a_verdict_that_cannot_be_made_is_a_failure_never_a_score(tiny_gguf: Path) -> None:
    long = JudgeItem(id="long", question="q?", passages=("word " * 400,), answer="A claim.")
    short = JudgeItem(id="short", question="q?", passages=("a short passage",), answer="A claim.")
    with Resources() as resources:
        judge = LlamaJudge(JudgeConfig(kind="llama", model=str(tiny_gguf), n_ctx=256), resources)
        judged, totals = judge_items([long, short], judge, None, metrics=("faithfulness",))
    assert judged[0].faithfulness is None and judged[0].failures == 1 and judged[0].sentences[0].supported is None
    assert judged[1].failures == 0 and judged[1].faithfulness in (0.0, 1.0)
    assert totals.failures == 1 and totals.calls == 2
