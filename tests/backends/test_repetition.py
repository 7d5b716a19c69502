"""The repetition stop: fires on the occurrence that makes an n-gram `repeats`-fold, never on varied text."""

from __future__ import annotations

import pytest

from ragopt.backends.repetition import RepetitionStop


def fed(stop: RepetitionStop, tokens: list[int]) -> int | None:
    """The index of the token on which the stop fired, or None."""
    for i, t in enumerate(tokens):
        if stop.add(t):
            return i
    return None


def test_a_loop_of_any_period_stops_after_the_third_period():
    period = [10, 11, 12, 13, 14]
    # 4-grams: the first period plus 3 tokens opens them; each later period repeats every one of them
    assert fed(RepetitionStop(ngram=4, repeats=3), period * 5) == 3 + 2 * len(period)
    # a period shorter than the n-gram repeats the n-gram every period too
    assert fed(RepetitionStop(ngram=6, repeats=3), [1, 2] * 10) == 5 + 2 * 2


def test_alternating_numbers_inside_a_repeated_sentence_are_still_a_loop():
    a = [50, 51, 52, 100, 53, 54]  # "The unit is 100 mmol/L."
    b = [50, 51, 52, 180, 53, 54]  # "The unit is 180 mmol/L."
    assert fed(RepetitionStop(ngram=3, repeats=3), (a + b) * 4) is not None


def test_text_without_repeats_never_stops():
    assert fed(RepetitionStop(ngram=2, repeats=2), list(range(200))) is None
    assert fed(RepetitionStop(ngram=4, repeats=3), [1, 2, 3, 4, 1, 2, 3, 4, 9]) is None  # twice is not three times


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        RepetitionStop(ngram=0, repeats=3)
    with pytest.raises(ValueError):
        RepetitionStop(ngram=4, repeats=1)
