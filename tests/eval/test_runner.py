"""TREC run files stay valid whatever the ids hold: an id with whitespace (HotpotQA's titles) is percent-encoded,
so every line splits into six columns, and urllib.parse.unquote gives the id back."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

from ragopt.eval.runner import trec_id, write_trec


def test_ids_with_whitespace_are_encoded_and_come_back(tmp_path: Path) -> None:
    ids = ["Nelson Mandela", "tab\there", "wide\u3000space", "100% sure", "plain-id_7", "北京"]
    write_trec(tmp_path / "run.trec", "my run", [("q 1", [(d, 1.0 / (i + 1)) for i, d in enumerate(ids)])])
    rows = [line.split() for line in (tmp_path / "run.trec").read_text(encoding="utf-8").splitlines()]
    assert all(len(r) == 6 for r in rows) and {r[0] for r in rows} == {"q%201"} and {r[5] for r in rows} == {"my%20run"}
    assert [unquote(r[2]) for r in rows] == ids
    assert rows[0][2] == "Nelson%20Mandela" and rows[3][2] == "100%25%20sure"
    assert trec_id("plain-id_7") == "plain-id_7" and trec_id("北京") == "北京"  # ids without whitespace or % unchanged
