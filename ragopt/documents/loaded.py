"""What every loader shares: a file's `Problem`, the `BadFile` a loader raises, the `LoadReport`, and reading
a text file as UTF-8."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ragopt.errors import BadFile
from ragopt.types import Document


@dataclass(frozen=True)
class Problem:
    """Why a file (or one page of it) was not loaded."""

    path: str
    reason: str
    page: int | None = None

    def __str__(self) -> str:
        return f"{self.path}: " + (f"page {self.page}: " if self.page is not None else "") + self.reason


@dataclass
class LoadReport:
    documents: list[Document]
    files: int = 0  # files read (or LangChain documents taken)
    skipped: list[Problem] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)  # extension -> files of no supported kind in a folder
    owned: set[str] = field(default_factory=set)  # ids whose tenant and scopes came with the data (corpus.jsonl)

    def summary(self) -> str:
        """One line: what was read, what was left out."""
        line = f"documents: {self.files} files -> {len(self.documents)} documents"
        if self.ignored:
            kinds = ", ".join(f"{n} {ext or '(no extension)'}" for ext, n in sorted(self.ignored.items()))
            line += f"; ignored files of other kinds: {kinds}"
        if self.skipped:
            line += f"; skipped {len(self.skipped)} (--on-error skip)"
        return line


def read_text(path: Path) -> str:
    """A text file's content: UTF-8 (a BOM tolerated); anything else is a BadFile naming the first bad byte;
    an empty (or blank) file is a BadFile too."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadFile(f"not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); convert it to UTF-8") from None
    if not text.strip():
        raise BadFile("empty file (no text)")
    return text
