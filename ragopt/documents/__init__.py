"""Documents in: a folder (recursive), a glob or a file of Markdown, text, HTML, PDF or corpus.jsonl, or a
LangChain loader, as `Document`s that keep their source file, page and heading path in metadata.

Every file is read and checked before anything is embedded: a bad file (a broken or encrypted PDF, text that
is not UTF-8, an empty file, a PDF page without a text layer) is one `Problem` naming the file (and page).
With `on_error="fail"` the first one is an InputError, so nothing is indexed; with `"skip"` the load goes on
and the report lists what was left out and why.
"""

from __future__ import annotations

from typing import Callable, Literal

from pydantic import Field

from ragopt.config import StrictModel
from ragopt.documents.loaded import LoadReport, Problem
from ragopt.types import Document

__all__ = ["DocsOptions", "LoadReport", "Problem", "corpus_documents", "load_documents"]

LANGCHAIN_PREFIX = "langchain:"


class DocsOptions(StrictModel):
    path: str = Field(description='a folder (recursive), a glob, a file, or "langchain:MODULE:ATTR"')
    on_error: Literal["fail", "skip"] = "fail"
    tenant_map: str | None = Field(None, description="a TOML file mapping path globs to tenant and scopes")


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
    report.documents = apply_access(report.documents, access, report.owned)
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
