"""Script shares are counted over letters only."""

from ragopt.text import ScriptShare, detect_analyzer


def test_shares_count_letters_only() -> None:
    share = ScriptShare(["中文ab 123，。", "かなab"])
    assert share.letters == 8
    assert share.han_share == 2 / 8
    assert share.cjk_share == 4 / 8
    assert ScriptShare([]).han_share == 0.0


def test_detect_analyzer() -> None:
    assert detect_analyzer(["An English abstract about cells."] * 10) == "english"
    assert detect_analyzer(["战国无双3是一款动作游戏。"]) == "chinese"
    # a few Chinese documents among many English ones still need segmenting
    assert detect_analyzer(["An English abstract about immune cells and proteins."] * 10 + ["战国无双是光荣开发的动作游戏"]) == "chinese"
