"""Where indexes and caches live: `--workspace`, else $RAGOPT_HOME, else ./.ragopt."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path


def workspace_root(explicit: str | Path | None = None) -> Path:
    """The workspace's folder, which may not exist yet."""
    return Path(explicit or os.environ.get("RAGOPT_HOME") or ".ragopt")


def workspace_dir(explicit: str | Path | None = None) -> Path:
    root = workspace_root(explicit)
    root.mkdir(parents=True, exist_ok=True)
    return root


def scratch_name(prefix: str) -> str:
    """A scratch folder's name that says which process of which host owns it."""
    return f"{prefix}@{socket.gethostname()}@{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    try:  # a killed child its parent has not reaped yet is a zombie: dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def remove_stale_scratch(folder: Path, prefix: str) -> list[Path]:
    """Delete `prefix...@HOST@PID` entries in `folder` whose process on this host is dead (a killed build);
    live builds and other hosts' folders (a shared workspace) are left alone. Returns what was removed."""
    host, removed = socket.gethostname(), []
    for p in folder.glob(f"{prefix}*@*@*") if folder.is_dir() else []:
        _, owner_host, pid = p.name.rsplit("@", 2)
        if owner_host == host and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed.append(p)
    return removed
