"""PDF files with pypdf: one document per page, `guide.pdf#page=N` (N from 1), metadata page N.

pypdf is pure Python (nothing to compile), reads page by page, and says when a file is encrypted. A file it
cannot parse, or one encrypted with a password (an empty user password is tried, as viewers do), is a bad
file; a page without a text layer (a scanned image) is a problem of that page alone, so `--on-error skip`
keeps the file's other pages.
"""

from __future__ import annotations

from pathlib import Path

from ragopt.documents.loaded import Problem
from ragopt.errors import BadFile
from ragopt.types import Document


def _reader(path: Path):  # type: ignore[no-untyped-def]
    from pypdf import PdfReader

    if path.stat().st_size == 0:
        raise BadFile("empty file (no text)")
    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise BadFile("encrypted PDF: it needs a password; save a decrypted copy")
        reader.pages[0]
    except BadFile:
        raise
    except Exception as exc:  # a parser of untrusted bytes: any failure means "cannot read this file"
        if type(exc).__name__ in ("FileNotDecryptedError", "DependencyError"):
            raise BadFile(f"encrypted PDF that cannot be opened ({exc})") from None
        raise BadFile(f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    return reader


def load(path: Path, rel: str) -> tuple[list[Document], list[Problem]]:
    reader = _reader(path)
    docs, problems = [], []
    for n, page in enumerate(reader.pages, start=1):
        try:
            text = page.extract_text() or ""
        except Exception as exc:  # one damaged page: the others may still be read
            problems.append(Problem(str(path), f"cannot extract its text ({type(exc).__name__}: {exc})", n))
            continue
        if not text.strip():
            problems.append(Problem(str(path), "no text layer (a scanned image?); run OCR on it first", n))
            continue
        docs.append(Document(id=f"{rel}#page={n}", title=path.stem, text=text.strip(), metadata={"source": rel, "page": n}))
    if not docs and not problems:
        raise BadFile("a PDF without pages")
    return docs, problems
