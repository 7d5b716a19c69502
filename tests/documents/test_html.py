"""HTML main text with BeautifulSoup: page furniture dropped, one line per block, sections at h1-h6."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.documents import VISITING_HTML
from ragopt.errors import BadFile
from ragopt.documents.html import load


def test_main_text_in_sections_without_navigation_scripts_or_footer(tmp_path: Path) -> None:
    (tmp_path / "v.html").write_text(VISITING_HTML, encoding="utf-8")
    docs, _ = load(tmp_path / "v.html", "v.html")
    assert [(d.id, d.metadata["headings"], d.text) for d in docs] == [
        ("v.html#section=1", ["Visiting hours"], "Visitors are welcome from 10:00 to 19:00 every day."),
        ("v.html#section=2", ["Visiting hours", "Intensive care"],
         "The intensive care unit allows two visitors per patient at a time.\n"
         "Children under 12 need a nurse's approval.\nFlowers are not allowed."),
    ]


def test_text_around_nested_blocks_and_a_page_without_headings(tmp_path: Path) -> None:
    page = "<html><body><!-- a comment --><div>Before <p>inside</p> after</div><pre>a  b\n c</pre></body></html>"
    (tmp_path / "p.htm").write_text(page, encoding="utf-8")
    docs, _ = load(tmp_path / "p.htm", "p.htm")
    assert [(d.id, d.title, d.text) for d in docs] == [("p.htm", "p", "Before\ninside\nafter\na  b\n c")]


def test_a_page_with_no_text_is_empty(tmp_path: Path) -> None:
    (tmp_path / "e.html").write_text("<html><head><script>x()</script></head><body><nav>Home</nav></body></html>",
                                     encoding="utf-8")
    with pytest.raises(BadFile, match="empty file"):
        load(tmp_path / "e.html", "e.html")
