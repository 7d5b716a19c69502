"""The routing rule (ragopt.text.routing), which serve's two-model routing and the generate stage's routed plans share:
short questions that ask for no reasoning go to the small backend, counted in words as a reader counts them."""

from __future__ import annotations

from ragopt.text.routing import Router, asks_for_reasoning


def test_router_sends_short_simple_questions_to_the_small_model() -> None:
    router = Router(small_max_words=6)
    assert router.route("What causes tides?") == "small"
    assert router.route("Why do tides happen twice a day?") == "default"  # asks for reasoning
    assert router.route("What is the name of the chess opening where black plays c5?") == "default"  # long
    assert Router(0).route("hi") == "default"


def test_a_chinese_question_is_routed_by_its_words_not_as_one_word() -> None:
    router = Router(small_max_words=6)
    assert router.route("上海在哪里？") == "small"  # 上海 / 在 / 哪里: 3 words
    long_question = "上海证券交易所每天开盘和收盘的具体时间分别是几点钟以及节假日安排"
    assert len(long_question.split()) == 1  # what the router used to count
    assert router.route(long_question) == "default"  # 14 words
    assert router.route("天空为什么是蓝色") == "default"  # short, but asks why


def test_reasoning_is_recognised_in_english_words_and_chinese_substrings() -> None:
    assert asks_for_reasoning("How do I book a visit?") and asks_for_reasoning("如何预约？")
    assert not asks_for_reasoning("Who shows up at the hospital?")  # "how" inside "shows" is no word
