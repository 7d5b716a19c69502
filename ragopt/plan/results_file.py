"""The one reader of a sweep's results.json: the file, its JSON and its schema version, checked before any field
is read. ragopt.eval.results.SweepResults (a room above) validates the whole document from what this returns;
ragopt.plan.saved rebuilds a trial's plan from the same dict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ragopt.errors import InputError

SCHEMA_VERSION = 1  # see docs/results-schema.md: renaming or removing a field, or changing its meaning, bumps it


def read_results(path: str | Path, flag: str | None = None) -> dict[str, Any]:
    """The JSON object of a results.json of this schema version (a file without `schema_version` is read as
    version 1); an InputError naming the file (and `flag`, the option that gave it) otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("results file not found", path=path, field=flag) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid JSON: {exc}", path=path, field=flag) from None
    if not isinstance(data, dict):
        raise InputError(f"not a results.json: a JSON {type(data).__name__}, not an object", path=path, field=flag)
    if data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise InputError(f"schema_version {data['schema_version']!r} is not supported (this ragopt reads {SCHEMA_VERSION})",
                         path=path, field="schema_version")
    return data
