"""Where indexes and caches live: `--workspace`, else $RAGOPT_HOME, else ./.ragopt."""

from __future__ import annotations

import os
from pathlib import Path


def workspace_dir(explicit: str | Path | None = None) -> Path:
    root = Path(explicit or os.environ.get("RAGOPT_HOME") or ".ragopt")
    root.mkdir(parents=True, exist_ok=True)
    return root
