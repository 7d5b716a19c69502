"""Analyzers: English stems and drops stopwords; Chinese segments Han runs with jieba's search mode and treats
everything else exactly as English; whitespace keeps every word as written (casefolded)."""

import pytest

from ragopt.text import make_analyzer


def test_english_stems_and_drops_stopwords() -> None:
    assert make_analyzer("english")("The running dogs of the ICU") == ["run", "dog", "icu"]
    assert make_analyzer("english", stopwords="none", stemmer="none")("The dogs") == ["the", "dogs"]


def test_chinese_segments_han_and_keeps_english_stemming() -> None:
    zh = make_analyzer("chinese")
    tokens = zh("《战国无双3》是由哪两个公司合作开发的？The running dogs")
    assert tokens[:3] == ["战国", "无双", "3"]
    assert "合作开发" in tokens and "合作" in tokens  # search mode: the long word and the words inside it
    assert "的" not in tokens and "是" not in tokens  # Chinese stopwords
    assert not {"《", "》", "？"} & set(tokens)  # punctuation is never a term
    assert tokens[-2:] == ["run", "dog"]  # Latin words analyzed exactly as by "english"
    assert zh("Only English here, running.") == make_analyzer("english")("Only English here, running.")
    assert "的" in make_analyzer("chinese", stopwords="none")("我的书")


def test_word_spans_give_word_boundaries() -> None:
    text = "请问ICU的医保卡在哪里"
    spans = make_analyzer("chinese").word_spans(text)
    assert [text[s:e] for s, e in spans] == ["请问", "ICU", "的", "医保", "医保卡", "在", "哪里"]
    english = "ICU's beds"
    assert [english[s:e] for s, e in make_analyzer("english").word_spans(english)] == ["ICU", "s", "beds"]


def test_whitespace_keeps_every_word() -> None:
    assert make_analyzer("whitespace")("The Running dogs") == ["the", "running", "dogs"]


def test_fingerprints_differ_by_settings() -> None:
    names = {make_analyzer(n).fingerprint for n in ("english", "chinese", "whitespace")}
    assert len(names) == 3
    assert make_analyzer("english").fingerprint != make_analyzer("english", stemmer="none").fingerprint


def test_unknown_name() -> None:
    with pytest.raises(ValueError, match="unknown analyzer 'klingon'"):
        make_analyzer("klingon")


def test_count_words_cuts_chinese_into_words_and_skips_punctuation() -> None:
    from ragopt.text.analyzers import count_words

    assert count_words("上海在哪里？") == 3  # not 1 (one space-free run) nor 6 (characters)
    assert count_words("《战国无双3》是由哪两个公司合作开发的？") == 10
    assert count_words("What causes ocean tides?") == 4
    assert count_words("CT检查前需要空腹吗") == 6  # Latin and Han words together


def test_a_phrase_is_held_as_whole_words_in_order() -> None:
    from ragopt.text import holds_phrase, plain_terms

    terms = plain_terms("How many rows did the last run of ICU_LOAD load, and is it known now?")
    assert holds_phrase(terms, "how many") and holds_phrase(terms, "Last Run") and holds_phrase(terms, "now")
    assert not holds_phrase(terms, "many how") and not holds_phrase(terms, "loaded") and not holds_phrase(terms, "")
    assert not holds_phrase(plain_terms("a lasting state"), "last")  # a word inside a longer word is not the word
    assert plain_terms("Running stopwords: the") == ["running", "stopwords", "the"]  # nothing stemmed or dropped
    zh = plain_terms("医保卡最近一次采集失败表现在哪里")
    assert holds_phrase(zh, "医保") and holds_phrase(zh, "最近") and holds_phrase(zh, "采集失败")
    assert not holds_phrase(zh, "现在")  # 表现|在: the characters of 现在 straddle two words
