"""Where indexes and caches live: `--workspace`, else $RAGOPT_HOME, else ./.ragopt; and what keeps their writes safe:
scratch names that say whose they are, locks on what a process holds open, and the named steps a crash test kills at."""

from __future__ import annotations

import fcntl
import os
import signal
import shutil
import socket
from pathlib import Path

from ragopt.errors import InputError


def workspace_root(explicit: str | Path | None = None) -> Path:
    """The workspace's folder, which may not exist yet."""
    return Path(explicit or os.environ.get("RAGOPT_HOME") or ".ragopt")


def check_folder_setting(path: str | Path, setting: str) -> None:
    """A folder setting (`--workspace`, $RAGOPT_HOME, $RAGOPT_MODEL_CACHE) that names a file, or a path through
    one, is one line naming the setting before any work: creating the folder would fail mid-run, with a traceback."""
    folder = Path(path).expanduser().absolute()
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise InputError("is a file, expected a folder" if candidate == folder else f"{candidate} is a file, "
                                 "so this folder cannot be made", path=folder, field=setting)
            return


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


LOCK = ".lock"
KILL_AT = "RAGOPT_TEST_KILL_AT"  # tests only: the step of a crash-safe write at which the process kills itself


def kill_point(step: str) -> None:
    """A named step of a crash-safe write. A crash test sets RAGOPT_TEST_KILL_AT to it: the process then sends itself
    SIGKILL here, a real kill (no `finally`, flush or atexit runs), so the test sees what a crash there leaves."""
    if os.environ.get(KILL_AT) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _lock_file(path: Path) -> int | None:
    for flags in (os.O_RDONLY | os.O_CREAT, os.O_RDONLY):  # created on first use; read-only where it must be
        try:
            return os.open(path, flags, 0o644)
        except OSError:
            continue
    return None


def lock(path: Path, *, shared: bool, wait: bool = True) -> int | None:
    """An flock on the lock file `path` (a folder's is FOLDER/.lock), kept until `release`: shared (one of those
    who hold the folder open) or exclusive (its one writer, alone). Without `wait`, None at once while another holder has it (flock locks belong
    to the open file, so another holder in this process counts too). None also where no lock file can be opened:
    the folder is gone, or read-only (no writer can change it either)."""
    fd = _lock_file(path)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
