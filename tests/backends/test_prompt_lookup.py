"""Prompt-lookup drafts: the continuation of the latest earlier occurrence of the longest matching suffix."""

from __future__ import annotations

import pytest

from ragopt.backends.prompt_lookup import PromptLookup


def test_the_draft_continues_the_latest_earlier_occurrence_of_the_longest_suffix():
    lookup = PromptLookup([1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 3], max_ngram=3)
    # suffix (3,) last occurred at index 7 -> continuation 7, 8, 3
    assert lookup.draft(2) == [7, 8]
    lookup.append(7)  # suffix (3, 7) occurred at 7-8: continuation 8, 3, 7
    assert lookup.draft(5) == [8, 3, 7]
    lookup.append(8)  # (3, 7, 8) -> 3, 7, 8
    assert lookup.draft(1) == [3]


def test_a_longer_match_wins_over_a_more_recent_shorter_one():
    lookup = PromptLookup([5, 6, 7, 1, 6, 2, 5, 6], max_ngram=2)
    assert lookup.draft(1) == [7]  # (5, 6) matched at 0-1, although (6,) occurred more recently at 4


def test_no_draft_without_an_earlier_occurrence_or_budget():
    lookup = PromptLookup([1, 2, 3], max_ngram=3)
    assert lookup.draft(4) == []  # (3,) never occurred before its own position
    assert PromptLookup([1, 1], max_ngram=1).draft(0) == []
    assert PromptLookup([], max_ngram=2).draft(3) == []


def test_min_ngram_excludes_short_matches_and_sizes_are_checked():
    assert PromptLookup([4, 9, 4], min_ngram=2, max_ngram=3).draft(2) == []
    assert PromptLookup([4, 9, 4], min_ngram=1, max_ngram=3).draft(2) == [9, 4]
    with pytest.raises(ValueError):
        PromptLookup([], min_ngram=3, max_ngram=2)
