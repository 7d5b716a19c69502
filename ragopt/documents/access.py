"""Tenants and scopes from a mapping file, so that a folder per tenant needs no code.

    # access.toml: the first rule whose glob matches a file's path (relative to --docs) decides
    [[files]]
    glob = "north/*"          # fnmatch-style; * also crosses folders
    tenant = "north"
    scopes = ["clinical"]

    [[files]]
    glob = "shared/*"         # no tenant: shared by every tenant (said out loud, never by default)

In a corpus that has tenants (a rule names one, or a corpus.jsonl document carries one), every file must be
covered by a rule: a file no rule covers is an error naming it, never silently visible to everyone. A
corpus.jsonl document says its own tenant and scopes (null: shared) and keeps them; a LangChain document
that carries them in metadata keeps them too.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from pydantic import Field

from ragopt.config import StrictModel, load_toml
from ragopt.errors import InputError
from ragopt.types import Document


class AccessRule(StrictModel):
    glob: str = Field(min_length=1)
    tenant: str | None = Field(None, min_length=1)
    scopes: tuple[str, ...] = ()


class AccessMap(StrictModel):
    files: list[AccessRule] = Field(min_length=1)


class LoadedMap:
    def __init__(self, path: str, rules: AccessMap):
        self.path, self.rules = path, rules.files

    def rule_for(self, source: str) -> AccessRule | None:
        return next((r for r in self.rules if fnmatch.fnmatchcase(source, r.glob)), None)


def load_access_map(path: str) -> LoadedMap:
    if not Path(path).is_file():
        raise InputError("tenant mapping file not found", path=path, field="--tenant-map")
    rules = load_toml(path, AccessMap)
    for i, rule in enumerate(rules.files):
        try:
            Document(id="check", text="", tenant=rule.tenant, scopes=rule.scopes)
        except ValueError as exc:
            raise InputError(str(exc).splitlines()[-1], path=path, field=f"files[{i}]") from None
    return LoadedMap(path, rules)


def _owned(doc: Document) -> bool:
    return doc.tenant is not None or bool(doc.scopes)


def apply_access(docs: list[Document], access: LoadedMap | None, owned: set[str] = frozenset()) -> list[Document]:  # type: ignore[assignment]
    """Documents with the tenant and scopes their file's rule gives (`owned` ids keep their own); see the module."""
    has_tenants = any(d.tenant is not None for d in docs) or bool(access and any(r.tenant for r in access.rules))
    out = []
    for doc in docs:
        if doc.id in owned:
            out.append(doc)
            continue
        source = doc.metadata.get("source")
        rule = access.rule_for(str(source)) if access and source is not None else None
        if rule is not None and not _owned(doc):
            doc = doc.model_copy(update={"tenant": rule.tenant, "scopes": tuple(sorted(set(rule.scopes)))})
        elif rule is None and has_tenants and not _owned(doc):
            where = f"no rule in {access.path} covers it" if access else "no --tenant-map gives it a tenant"
            raise InputError(f"{where}, and this corpus has tenants: add a rule (without a tenant to share it with "
                             "every tenant)", path=str(source or doc.id), field="--tenant-map")
        out.append(doc)
    return out
