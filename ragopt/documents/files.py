"""Which files `--docs PATH` names (a folder, recursively; a glob; one file) and which loader reads each.

A document's id and its metadata "source" are its path relative to the folder (or to the glob's fixed
prefix), in POSIX form: moving the folder changes neither, so the knowledge-base version stays the same
while the content does. Files are read in sorted order; hidden files and folders are left out.
"""

from __future__ import annotations

import glob
import logging
from pathlib import Path
from typing import Callable, Literal

from ragopt.documents.loaded import LoadReport, Problem
from ragopt.errors import BadFile
from ragopt.errors import InputError
from ragopt.types import Document

Loader = Callable[[Path, str], tuple[list[Document], list[Problem]]]
CORPUS_NAME = "corpus.jsonl"


def _loaders() -> dict[str, Loader]:
    from ragopt.documents import corpus, html, markdown, pdf, plain

    return {
        ".md": markdown.load, ".markdown": markdown.load, ".txt": plain.load, ".html": html.load, ".htm": html.load,
        ".pdf": pdf.load, ".jsonl": corpus.load,
    }


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def find_files(spec: str) -> tuple[Path, list[Path]]:
    """(root, files under it): a folder's files recursively, a glob's matches, or the one file given."""
    path = Path(spec).expanduser()
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file() and not _hidden(p.relative_to(path))]
        return path, sorted(files)
    if path.is_file():
        return path.parent, [path]
    if glob.has_magic(spec):
        fixed = [part for part in Path(spec).parts if not glob.has_magic(part)]
        root = Path(*Path(spec).parts[: len(fixed)]) if fixed else Path(".")
        while glob.has_magic(str(root)):
            root = root.parent
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not files:
            raise InputError("this glob matches no files", path=spec, field="--docs")
        return root, files
    raise InputError("no such file or folder", path=spec, field="--docs")


def load_path(spec: str, on_error: Literal["fail", "skip"], *, progress: bool = False) -> LoadReport:
    """Read every supported file; a Problem is an InputError at once (fail) or listed in the report (skip)."""
    root, files = find_files(spec)
    loaders = _loaders()
    single = Path(spec).is_file()
    report = LoadReport(documents=[])
    from ragopt.progress import progress_bar

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its recoverable-damage warnings would print as noise
    for path in progress_bar(files, desc="reading documents", unit="file", disable=not progress):
        ext = path.suffix.lower()
        is_corpus = ext == ".jsonl" and (single or path.name == CORPUS_NAME)
        if ext not in loaders or (ext == ".jsonl" and not is_corpus):
            if single:
                kinds = ", ".join(sorted(loaders))
                raise InputError(f"unsupported kind of file (supported: {kinds}, corpus.jsonl)", path=path, field="--docs")
            report.ignored[ext] = report.ignored.get(ext, 0) + 1
            continue
        report.files += 1
        rel = path.relative_to(root).as_posix()
        try:
            docs, problems = loaders[ext](path, rel)
        except BadFile as exc:
            docs, problems = [], [Problem(str(path), exc.reason, exc.page)]
        if problems and on_error == "fail":
            first = problems[0]
            where = f"page {first.page}: " if first.page is not None else ""
            more = f" (and {len(problems) - 1} more in this file)" if len(problems) > 1 else ""
            raise InputError(f"{where}{first.reason}{more}; --on-error skip leaves such files out", path=path)
        report.skipped.extend(problems)
        report.documents.extend(docs)
        if is_corpus:
            report.owned.update(d.id for d in docs)
    _check_unique(report.documents)
    if not report.documents:
        raise InputError("no documents to index" + (f" ({len(report.skipped)} skipped)" if report.skipped else ""),
                         path=spec, field="--docs")
    return report


def _check_unique(docs: list[Document]) -> None:
    seen: dict[str, Document] = {}
    for d in docs:
        if d.id in seen:
            first = seen[d.id].metadata.get("source", "a corpus.jsonl")
            raise InputError(f"document id {d.id!r} is given twice (also by {first})",
                             path=str(d.metadata.get("source", d.id)), field="--docs")
        seen[d.id] = d
