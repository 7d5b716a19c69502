"""Word tokens: whitespace tokens count each Han character, word units split Han runs into characters."""

from ragopt.text import word_spans, word_units, words


def test_word_spans_count_han_characters_one_by_one() -> None:
    text = "光荣和ω-force开发 the game。"
    assert [text[s:e] for s, e in word_spans(text)] == ["光", "荣", "和", "ω-force", "开", "发", "the", "game", "。"]


def test_word_units() -> None:
    assert word_units("战国3是Running游戏") == ["战", "国", "3", "是", "running", "游", "戏"]
    assert word_units("Plain English, words.") == words("Plain English, words.") == ["plain", "english", "words"]
