"""A server as a child process: a free loopback port, the command started with its output in a log file, its health
URL polled until it answers (failing with the log's tail if the process exits first or the timeout passes), and
stopped (terminate, wait, kill after a grace period; optionally its whole process group).

`LlamaServer`, the test fixtures and the benchmarks that run `ragopt serve` all start their servers through here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from ragopt.errors import ChildServerError


def free_port() -> int:
    """A loopback TCP port nobody listens on now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM when its parent dies, so a killed `ragopt serve` leaves no llama-server
    spinning on the cores (ggml threads of two engines slow each other down many times over). Linux ties
    this to the thread that started the child: start servers from a long-lived thread (the main one)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start(cmd: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
          group: bool = False, die_with_parent: bool = False) -> subprocess.Popen[bytes]:
    """`cmd` started with stdout and stderr into `log` (created or truncated) and no stdin. `group`: in a new
    session, so `stop(..., group=True)` reaches the children it starts; `die_with_parent`: see `_die_with_parent`."""
    with open(log, "wb") as out:
        return subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                start_new_session=group, preexec_fn=_die_with_parent if die_with_parent else None)


def output_tail(log: Path | None, lines: int = 20) -> str:
    """The last `lines` lines of a server's log ("" when there is none)."""
    if log is None or not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """Whether GET `url` answers 200 now."""
    import httpx

    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path | None, *, timeout_s: float, name: str = "server",
                 interval_s: float = 0.1, request_timeout_s: float = 2.0) -> None:
    """Poll `url` until it answers 200; ChildServerError (with the log's tail) if `process` exits first or
    `timeout_s` passes. The process is left running either way: stopping it is the caller's."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ChildServerError(f"{name} exited during startup (code {process.returncode}):\n{output_tail(log)}")
        if answers(url, request_timeout_s):
            return
        time.sleep(interval_s)
    raise ChildServerError(f"{name} not healthy after {timeout_s:.0f} s:\n{output_tail(log)}")


def stop(process: subprocess.Popen[bytes], *, grace_s: float = 10.0, group: bool = False) -> None:
    """SIGTERM, up to `grace_s` for it to exit, then SIGKILL (`grace_s` 0: SIGKILL at once). `group`: the signals go
    to the process group `start(..., group=True)` made, so the server's own children stop too."""
    if process.poll() is not None:
        return

    def send(sig: signal.Signals) -> None:
        try:
            if group:
                os.killpg(process.pid, sig)
            else:
                process.send_signal(sig)
        except ProcessLookupError:  # it exited between poll() and now
            pass

    if grace_s > 0:
        send(signal.SIGTERM)
        try:
            process.wait(grace_s)
            return
        except subprocess.TimeoutExpired:
            pass
    send(signal.SIGKILL)
    process.wait()


@contextmanager
def served(cmd: Sequence[str], health_url: str, *, timeout_s: float, log: Path | None = None, name: str = "server",
           env: Mapping[str, str] | None = None, cwd: str | Path | None = None, interval_s: float = 0.1,
           request_timeout_s: float = 2.0, grace_s: float = 10.0, group: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    """`cmd` running until the block ends, entered once `health_url` answers. Output goes to `log` (kept), or to a
    temporary file removed after (its tail is in any ChildServerError)."""
    temporary = log is None
    if log is None:
        fd, path = tempfile.mkstemp(prefix=f"{Path(cmd[0]).name}-", suffix=".log")
        os.close(fd)
        log = Path(path)
    try:
        process = start(cmd, log, env=env, cwd=cwd, group=group)
        try:
            wait_healthy(process, health_url, log, timeout_s=timeout_s, name=name, interval_s=interval_s,
                         request_timeout_s=request_timeout_s)
            yield process
        finally:
            stop(process, grace_s=grace_s, group=group)
    finally:
        if temporary:
            log.unlink(missing_ok=True)
