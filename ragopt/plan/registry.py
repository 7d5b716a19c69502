"""The registry of optional stage kinds: ragopt's own (ragopt.plan.builtin_stages), loaded on first lookup so that
`ragopt --help` imports no stage module, and any registered with `register_stage`."""

from __future__ import annotations

from ragopt.errors import InputError
from ragopt.plan.spec import StageSpec

_SPECS: dict[str, StageSpec] = {}
_BUILTINS_LOADED = False


def register_stage(spec: StageSpec) -> StageSpec:
    """Make a stage kind available to plans and sweeps (re-registering a kind replaces it)."""
    _SPECS[spec.kind] = spec
    return spec


def unregister_stage(kind: str) -> None:
    _SPECS.pop(kind, None)


def stage_specs() -> dict[str, StageSpec]:
    """Every registered kind, ragopt's own stages included (their modules register on first use)."""
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        from ragopt.plan.builtin_stages import BUILTIN_SPECS  # the stage modules' configs, imported on first use

        for spec in BUILTIN_SPECS:
            _SPECS.setdefault(spec.kind, spec)  # a kind registered before first use keeps its own spec
    return dict(_SPECS)


def spec_for(kind: str, source: str = "stages") -> StageSpec:
    specs = stage_specs()
    if kind not in specs:
        raise InputError(f"unknown stage kind {kind!r}; known: {', '.join(sorted(specs)) or '(none)'}", field=source)
    return specs[kind]
