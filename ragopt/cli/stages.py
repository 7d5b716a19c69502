"""`ragopt stages`: the optional stage kinds a plan or sweep can use, with their knobs (from the declarations)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    return subparsers.add_parser("stages", help="list the stage kinds and the knobs a sweep can vary (--set KIND.KNOB=...)")


def run(args: argparse.Namespace) -> int:
    from ragopt.config import knobs
    from ragopt.plan import stage_specs

    for kind, spec in sorted(stage_specs().items(), key=lambda kv: kv[0]):
        print(f"{kind}  (slot {spec.slot})")
        for name, info in spec.config.model_fields.items():
            marker = "knob" if name in knobs(spec.config) else "    "
            sweep = (info.json_schema_extra or {}).get("sweep") if isinstance(info.json_schema_extra, dict) else None
            default = info.get_default(call_default_factory=True)
            extra = f"  sweep {sweep}" if sweep else ""
            print(f"  {marker} {kind}.{name} = {default!r}{extra}  {info.description or ''}".rstrip())
    return 0
