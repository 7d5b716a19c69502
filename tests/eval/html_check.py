"""The report pages' shape: balanced tags, and self-contained (no script, stylesheet link or frame, nothing
fetched from a URL)."""

import re
from html.parser import HTMLParser


class _TagCounter(HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr", "path", "rect", "use", "stop", "circle", "ellipse", "line",
            "polyline", "polygon"}

    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.tags = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unbalanced </{tag}> (open: {self.stack[-3:]})")
            return
        self.stack.pop()


def check_html(text: str) -> _TagCounter:
    p = _TagCounter()
    p.feed(text)
    assert not p.errors, p.errors[:3]
    assert p.stack == [], p.stack
    # self-contained: nothing fetched from anywhere
    for tag, attrs in p.tags:
        assert tag not in ("script", "link", "iframe"), tag
        for key in ("src", "href", "xlink:href"):
            val = attrs.get(key) or ""
            assert not re.match(r"^(https?:|//|file:)", val), (tag, key, val)
    return p


class _Table(HTMLParser):
    """The rows of the first <table class='...'> of a page, as cell texts (markup dropped)."""

    def __init__(self, cls: str):
        super().__init__()
        self.cls, self.depth, self.rows, self.cell = cls, 0, [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and (self.depth or self.cls in (dict(attrs).get("class") or "").split()):
            self.depth += 1
        elif self.depth == 1 and tag == "tr":
            self.rows.append([])
        elif self.depth == 1 and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "table" and self.depth:
            self.depth = -1 if self.depth == 1 else self.depth - 1  # -1: done, later tables ignored
        elif self.depth == 1 and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join(self.cell.split()))
            self.cell = None

    def handle_data(self, data):
        if self.depth == 1 and self.cell is not None:
            self.cell += data


def table_rows(page: str, cls: str) -> list[dict[str, str]]:
    """The table's body rows as {header: cell text}."""
    p = _Table(cls)
    p.feed(page)
    assert p.rows, f"no table.{cls}"
    head, *body = p.rows
    return [dict(zip(head, row)) for row in body]
