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
