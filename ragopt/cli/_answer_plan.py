"""The plan `ask` and `serve` answer with: a saved plan (--from, --plan), or without one and without a flag that
shapes the plan the workspace's last sweep selection, where there is one (the results.json `ragopt sweep` writes by
default, --out runs/sweep, under the workspace or the current folder), else the plan the flags describe, whose
chunker is ANSWER_CHUNKER unless a chunking flag is given; what was chosen by default is said on stderr."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ragopt.cli._chunking import chunking_given
from ragopt.cli._common import from_flags, retrieval_plan, take_plan_flags
from ragopt.errors import InputError

SWEEP_RESULTS = Path("runs") / "sweep" / "results.json"


def last_sweep_results(args: argparse.Namespace) -> Path | None:
    """The newest of WORKSPACE/runs/sweep/results.json and ./runs/sweep/results.json, or None."""
    from ragopt.workspace import workspace_root

    found = [p for p in (workspace_root(args.workspace) / SWEEP_RESULTS, SWEEP_RESULTS) if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime_ns) if found else None


def last_sweep_plan(args: argparse.Namespace) -> tuple[Any, str | None]:
    """(the last sweep's selected plan, a SavedPlan, or None when there is none or it cannot be read; the line that
    says which, for stderr once every flag is checked)."""
    from ragopt.plan import load_plan

    path = last_sweep_results(args)
    if path is None:
        return None, None
    try:
        saved = load_plan(path)
    except InputError as exc:
        return None, f"note: not answering with the last sweep's selection: {exc}"
    return saved, (f"note: answering with the last sweep's selection in {path} (its plan, chunker "
                   f"{saved.plan.chunker.label}); --from, --plan or plan flags choose another")


def answer_plan(args: argparse.Namespace, saved: Any, generator: tuple[str, str | None, str], given: dict[str, tuple[str, Any]],
                answer_stages: dict[str, tuple[str | None, dict[str, Any]]] | None = None) -> tuple[Any, Any]:
    """The plan `ask` and `serve` answer with, assembled by ragopt.plan as a sweep trial is: the saved plan (--from,
    --plan) as it was measured, or the plan the flags describe (chunking, embedder, retrieval, and the generator
    kind's config from `generator` = (flag, choice given or None, default choice) and the `given` settings;
    `answer_stages`: kind -> (the flag that set it or None, its values)). A flag that would change a saved
    plan is refused: what is served from a saved plan is what the sweep measured. The plan flags left out get their
    defaults here (take_plan_flags), so this comes before anything else reads them. Without --from, --plan and any
    flag that shapes the plan, the workspace's last sweep selection is the saved plan (last_sweep_plan).
    Returns (the plan, the saved plan it is or None)."""
    plan_flags = take_plan_flags(args)
    changing = [flag for flag, value in [generator[:2], *given.values()] if value is not None]
    changing += [flag for flag, values in (answer_stages or {}).values() if flag]
    changing += plan_flags
    if saved is None and not changing and not (args.from_results or args.plan):
        saved, note = last_sweep_plan(args)
        args.plan_notes = [note] if note else []
    if saved is not None:
        if changing:
            raise InputError("the plan (--from/--plan) decides this; it is served as it was measured: leave the flag out",
                             field=changing[0])
        return saved.plan, saved
    from ragopt.plan import PlanConfig, kind_in_slot, spec_for
    from ragopt.stages.spec import GENERATE_SLOT

    kind = kind_in_slot(GENERATE_SLOT)
    # a rule across fields (max_tokens below n_ctx) is blamed on the output budget's flag
    flags = {name: flag for name, (flag, _) in given.items()} | {"generator": generator[0], "": "--max-tokens"}
    choice = generator[1] or generator[2]
    config = from_flags(spec_for(kind).config, flags, **{name: value for name, (_, value) in given.items()}, generator=choice)
    stages = {kind: config.model_dump(mode="json", exclude_defaults=True) | {"generator": choice},
              **{k: v for k, (_, v) in (answer_stages or {}).items()}}
    plan = PlanConfig(**retrieval_plan(args), stages=stages)
    if not chunking_given(args) and (args.dataset or args.docs):
        args.plan_notes = [*getattr(args, "plan_notes", []), f"note: cutting the documents with the default chunker, "
                           f"{plan.chunker.label} (docs/chunking.md; --chunker and --chunk-size choose another)"]
    return plan, None


def say_plan_notes(args: argparse.Namespace) -> None:
    """What answer_plan chose by default (the last sweep's plan, the default chunker), on stderr: once every flag is
    checked, so a bad flag stays one line."""
    for note in getattr(args, "plan_notes", []):
        print(note, file=sys.stderr)
