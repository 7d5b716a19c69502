"""The search behind prompt fitting: the guided search over one dimension, and prompt lines' token counts."""

from __future__ import annotations

from ragopt.stages.prompt_search import LineCounts, largest


def test_the_guided_search_finds_the_largest_that_fits_from_any_guess() -> None:
    for lo in (0, 1):
        for hi in range(lo, 12):
            for answer in range(lo - 1, hi + 1):  # lo - 1: not even lo holds
                for start in (None, *range(lo - 2, hi + 3)):
                    checked: list[int] = []
                    found = largest(lo, hi, lambda x: checked.append(x) or x <= answer, start=start)
                    assert found == (None if answer < lo else answer), (lo, hi, answer, start)
                    assert all(lo <= x <= hi for x in checked)


def test_line_counts_tokenize_each_distinct_line_once_and_add_up() -> None:
    tokenized: list[str] = []

    class Words:
        def tokenize(self, text: str) -> list[int]:
            tokenized.append(text)
            return list(range(len(text.split())))

    lines = LineCounts(Words())
    text = "a b c\n\nd e\na b c\n"
    assert lines.estimate(text) == 8 and lines.estimate(text) == 8
    assert sorted(tokenized) == ["\n", "a b c\n", "d e\n"]  # each distinct line once, over both estimates
    assert not lines.exact  # no `splits_on_whitespace`: an estimate only
