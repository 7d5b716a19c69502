"""LangChain documents in: what `loader.load()` returns, as ragopt documents.

A LangChain document's id is its own `id`, else metadata "id", else its source (metadata "source") with the
page (LangChain's PDF loaders count pages from 0 in metadata "page"; ragopt counts from 1, as a reader does),
else a hash of its text; repeats get `~2`, `~3`. Tenant and scopes may sit in metadata (or come from a
--tenant-map rule matching the source).
"""

from __future__ import annotations

from typing import Any, Iterable

from ragopt.documents.loaded import LoadReport
from ragopt.errors import InputError
from ragopt.types import Document


def from_langchain(documents: Iterable[Any]) -> list[Document]:
    """`loader.load()`'s documents as ragopt documents (see the module for ids and pages)."""
    out, seen = [], {}
    for i, lc in enumerate(documents):
        if not hasattr(lc, "page_content"):
            raise InputError(f"item {i} is a {type(lc).__name__}, not a LangChain Document", field="--docs")
        explicit_id = getattr(lc, "id", None) or (lc.metadata or {}).get("id") is not None
        doc = Document.from_langchain(lc)  # id (own, metadata or text hash), title, tenant, scopes
        metadata = dict(doc.metadata)
        if isinstance(metadata.get("page"), int):
            metadata["page"] += 1
        base = doc.id
        if not explicit_id and metadata.get("source"):
            base = str(metadata["source"]) + (f"#page={metadata['page']}" if metadata.get("page") is not None else "")
        seen[base] = seen.get(base, 0) + 1
        out.append(doc.model_copy(update={"id": base if seen[base] == 1 else f"{base}~{seen[base]}", "metadata": metadata}))
    return out


def load_langchain_target(target: str) -> LoadReport:
    """`MODULE:ATTR` names a loader (anything with `load()`), a list of Documents, or a no-argument callable
    returning either."""
    from ragopt.config import resolve_target

    obj = resolve_target(target, field="--docs")
    if callable(obj) and not hasattr(obj, "load"):
        obj = obj()
    docs = obj.load() if hasattr(obj, "load") else obj
    if not isinstance(docs, (list, tuple)):
        raise InputError(f"{target!r} gives a {type(docs).__name__}: expected a loader or a list of Documents", field="--docs")
    documents = [d for d in from_langchain(docs) if d.text.strip()]
    if not documents:
        raise InputError(f"{target!r} gave no documents with text", field="--docs")
    return LoadReport(documents=documents, files=len(docs))
