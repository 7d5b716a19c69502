"""Sentence spans end at English and Chinese sentence ends, with the closing quotes kept in the sentence."""

from ragopt.text import sentence_spans, sentences


def test_chinese_sentence_ends_split_without_spaces() -> None:
    text = "《战国无双3》由光荣开发。它于2010年发售！“你好吗？”他问道。然后……他走了；真的吗?我不知道"
    assert sentences(text) == ["《战国无双3》由光荣开发。", "它于2010年发售！", "“你好吗？”", "他问道。", "然后……",
                               "他走了；", "真的吗?", "我不知道"]


def test_spans_cover_the_text_in_order() -> None:
    text = "第一句。 第二句！\n第三句"
    spans = sentence_spans(text)
    assert [text[s:e] for s, e in spans] == ["第一句。", "第二句！", "第三句"]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_english_rules_unchanged() -> None:
    text = 'Hello world. This is it! "Quote." Next (one). e.g. small. Wait… what? Line\nTwo'
    assert sentences(text) == ["Hello world.", "This is it!", '"Quote."', "Next (one). e.g. small.", "Wait… what?",
                               "Line", "Two"]


def test_ellipsis_or_ascii_marks_end_a_sentence_only_beside_han() -> None:
    assert sentences("他走了…她来了") == ["他走了…", "她来了"]
    assert sentences("好!我来") == ["好!", "我来"]
    assert sentences("v1.2 release!next") == ["v1.2 release!next"]
