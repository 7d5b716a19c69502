"""Documents in: a folder (recursive), a glob or a file of Markdown, text, HTML, PDF or corpus.jsonl, or a
LangChain loader, as `Document`s that keep their source file, page and heading path in metadata.

Every file is read and checked before anything is embedded: a bad file (a broken or encrypted PDF, text that
is not UTF-8, an empty file, a PDF page without a text layer) is one `Problem` naming the file (and page).
With `on_error="fail"` the first one is an InputError, so nothing is indexed; with `"skip"` the load goes on
and the report lists what was left out and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

from pydantic import Field

from ragopt.config import StrictModel
from ragopt.types import Document

LANGCHAIN_PREFIX = "langchain:"


class DocsOptions(StrictModel):
    path: str = Field(description='a folder (recursive), a glob, a file, or "langchain:MODULE:ATTR"')
    on_error: Literal["fail", "skip"] = "fail"
    tenant_map: str | None = Field(None, description="a TOML file mapping path globs to tenant and scopes")


@dataclass(frozen=True)
class Problem:
    """Why a file (or one page of it) was not loaded."""

    path: str
    reason: str
    page: int | None = None

    def __str__(self) -> str:
        return f"{self.path}: " + (f"page {self.page}: " if self.page is not None else "") + self.reason


class BadFile(Exception):
    """Raised by a loader for its file (or one page, where it can go on without it)."""

    def __init__(self, reason: str, page: int | None = None):
        super().__init__(reason)
        self.reason, self.page = reason, page


@dataclass
class LoadReport:
    documents: list[Document]
    files: int = 0  # files read (or LangChain documents taken)
    skipped: list[Problem] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)  # extension -> files of no supported kind in a folder

    def summary(self) -> str:
        """One line: what was read, what was left out."""
        line = f"documents: {self.files} files -> {len(self.documents)} documents"
        if self.ignored:
            kinds = ", ".join(f"{n} {ext or '(no extension)'}" for ext, n in sorted(self.ignored.items()))
            line += f"; ignored files of other kinds: {kinds}"
        if self.skipped:
            line += f"; skipped {len(self.skipped)} (--on-error skip)"
        return line


def load_documents(options: DocsOptions, *, progress: bool = False) -> LoadReport:
    """Every document `options.path` names, with tenants and scopes from the mapping file; see the module."""
    from ragopt.documents.access import apply_access, load_access_map
    from ragopt.documents.files import load_path

    access = load_access_map(options.tenant_map) if options.tenant_map else None  # bad mapping: before any file
    if options.path.startswith(LANGCHAIN_PREFIX):
        from ragopt.documents.langchain import load_langchain_target

        report = load_langchain_target(options.path.removeprefix(LANGCHAIN_PREFIX))
    else:
        report = load_path(options.path, options.on_error, progress=progress)
    report.documents = apply_access(report.documents, access)
    return report


def corpus_documents(dataset: str | None, split: str, docs: DocsOptions | None, *, progress: bool = False,
                log: Callable[[str], None] | None = None) -> list[Document]:
    """The documents of `docs` (what was read and skipped told to `log`, one line each), else of the
    evaluation set `dataset`."""
    if docs is None:
        from ragopt.data import load_evalset

        return load_evalset(str(dataset), split=split).documents
    report = load_documents(docs, progress=progress)
    if log is not None:
        log(report.summary())
        for problem in report.skipped:
            log(f"skipped {problem}")
    return report.documents
