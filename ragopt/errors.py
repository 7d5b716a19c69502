"""Errors about bad input: each names the file, line and field, so the CLI can print one line and exit 2."""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None, field: str | None = None):
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or ""
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f" [{self.field}]" if where else f"[{self.field}]"
        return f"{where}: {self.message}" if where else self.message


class TenantRequired(InputError):
    """A query without a tenant against an index that holds tenant data: an error, never "everything"."""

    def __init__(self) -> None:
        super().__init__("this index holds tenant data: the query must name its tenant", field="tenant")
