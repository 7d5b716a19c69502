"""The registry of chunkers: every module of this package that declares a `SPEC` (ragopt.chunking.spec), collected
on the first lookup. The names are ChunkerConfig's (ragopt.config.CHUNKERS); tests/chunking checks they agree."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from functools import cache

from ragopt.chunking.spec import ChunkerSpec
from ragopt.errors import InputError


@cache
def chunker_specs() -> dict[str, ChunkerSpec]:
    out = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        spec = getattr(importlib.import_module(f"ragopt.chunking.{info.name}"), "SPEC", None)
        if isinstance(spec, ChunkerSpec):
            out[spec.name] = spec
    return out


def chunker_spec(name: str) -> ChunkerSpec:
    specs = chunker_specs()
    if name not in specs:
        raise InputError(f"unknown chunker {name!r}; chunkers: {', '.join(sorted(specs))}", field="chunker.chunker")
    return specs[name]
