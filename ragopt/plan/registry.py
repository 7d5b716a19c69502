"""The registry of stage kinds. Each stage module declares its kind where it is defined (a `SPEC`, see
ragopt.stages.spec); the registry collects them, on the first lookup (so `ragopt --help` imports no stage
module), from three places:

- ragopt's own stage modules: every module of the ragopt.stages package that has a `SPEC`;
- installed packages: entry points in the group "ragopt.stages", each naming a StageSpec or a module with one
  (`[project.entry-points."ragopt.stages"] mystage = "mypkg.mystage:SPEC"`);
- `register_stage(spec)` at run time (re-registering a kind replaces it).
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from ragopt.errors import InputError
from ragopt.stages.spec import StageSpec

ENTRY_POINT_GROUP = "ragopt.stages"
_SPECS: dict[str, StageSpec] = {}
_COLLECTED = False


def register_stage(spec: StageSpec) -> StageSpec:
    """Make a stage kind available to plans and sweeps (re-registering a kind replaces it)."""
    _SPECS[spec.kind] = spec
    return spec


def unregister_stage(kind: str) -> None:
    _SPECS.pop(kind, None)


def declared_specs(obj: Any) -> list[StageSpec]:
    """The specs a module declares (`SPEC`, or a sequence `SPECS`), or `obj` itself when it is a spec."""
    if isinstance(obj, StageSpec):
        return [obj]
    if isinstance(obj, ModuleType):
        found = [getattr(obj, "SPEC", None), *getattr(obj, "SPECS", ())]
        return [s for s in found if isinstance(s, StageSpec)]
    raise TypeError(f"not a StageSpec or a module declaring one: {obj!r}")


def _builtin_specs() -> list[StageSpec]:
    import ragopt.stages

    names = sorted(m.name for m in pkgutil.iter_modules(ragopt.stages.__path__))
    return [spec for name in names for spec in declared_specs(importlib.import_module(f"ragopt.stages.{name}"))]


def _installed_specs() -> list[StageSpec]:
    out = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
        try:
            out += declared_specs(ep.load())
        except (ImportError, AttributeError, TypeError) as exc:
            raise InputError(f"entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}) gives no stage spec: {exc}") from None
    return out


def stage_specs() -> dict[str, StageSpec]:
    """Every known kind: ragopt's own, the installed packages', and any registered at run time (a kind registered
    before the first lookup keeps its own spec)."""
    global _COLLECTED
    if not _COLLECTED:
        _COLLECTED = True
        for spec in [*_builtin_specs(), *_installed_specs()]:
            _SPECS.setdefault(spec.kind, spec)
    return dict(_SPECS)


def kind_in_slot(slot: str) -> str:
    """The one kind registered for `slot` (e.g. the generator's, for the flags of `ragopt ask` and `serve`)."""
    kinds = sorted(kind for kind, spec in stage_specs().items() if spec.slot == slot)
    if len(kinds) != 1:
        raise InputError(f"slot {slot!r} holds {len(kinds)} stage kinds ({', '.join(kinds) or 'none'}); one was expected")
    return kinds[0]


def spec_for(kind: str, source: str = "stages") -> StageSpec:
    specs = stage_specs()
    if kind not in specs:
        raise InputError(f"unknown stage kind {kind!r}; known: {', '.join(sorted(specs)) or '(none)'}", field=source)
    return specs[kind]
