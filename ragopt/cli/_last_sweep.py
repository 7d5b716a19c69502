"""`ask` and `serve` without --from or --plan answer with the workspace's last sweep selection, where there is one:
the results.json `ragopt sweep` writes by default (--out runs/sweep), under the workspace or the current folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ragopt.errors import InputError

SWEEP_RESULTS = Path("runs") / "sweep" / "results.json"


def last_sweep_results(args: argparse.Namespace) -> Path | None:
    """The newest of WORKSPACE/runs/sweep/results.json and ./runs/sweep/results.json, or None."""
    from ragopt.workspace import workspace_root

    found = [p for p in (workspace_root(args.workspace) / SWEEP_RESULTS, SWEEP_RESULTS) if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime_ns) if found else None


def last_sweep_plan(args: argparse.Namespace) -> Any:
    """The last sweep's selected plan (a SavedPlan), said on stderr; None when there is none, or when it cannot be
    read (said too: the default plan answers instead)."""
    from ragopt.plan import load_plan

    path = last_sweep_results(args)
    if path is None:
        return None
    try:
        saved = load_plan(path)
    except InputError as exc:
        print(f"note: not answering with the last sweep's selection: {exc}", file=sys.stderr)
        return None
    print(f"note: answering with the last sweep's selection in {path} (its plan, chunker {saved.plan.chunker.label}); "
          "--from, --plan or plan flags choose another", file=sys.stderr)
    return saved
