"""Servers as child processes, with real ones: Python's http.server as the healthy server, short Python programs as
one that exits at startup, one that never answers, one that ignores SIGTERM and one that starts a child of its own."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from ragopt.backends.child_server import answers, free_port, served, start, stop
from ragopt.errors import ChildServerError


def _gone(pid: int) -> bool:
    """No process `pid`, or only its zombie (a grandchild's is reaped by whoever adopted it, maybe never here)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_for(path: Path, text: str) -> None:
    for _ in range(200):
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


def test_served_is_entered_once_the_health_url_answers_and_stops_the_server_after(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    log = tmp_path / "http.log"
    with served([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], url, timeout_s=30, log=log,
                cwd=tmp_path) as process:
        assert answers(url) and process.poll() is None
    assert process.returncode == -signal.SIGTERM and not answers(url)
    assert "GET / " in log.read_text()  # the given log is kept, with the server's own output


def test_a_server_that_exits_first_fails_with_its_output_tail(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import sys; print('line one'); print('bad --flag'); sys.exit(2)"]
    with pytest.raises(ChildServerError, match=r"(?s)fake exited during startup \(code 2\):\nline one\nbad --flag"):
        with served(cmd, f"http://127.0.0.1:{free_port()}/", timeout_s=30, name="fake"):
            pytest.fail("entered a server that exited")


def test_a_server_that_never_answers_fails_after_the_timeout_and_is_stopped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    cmd = [sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
                                 "print('still loading', flush=True); time.sleep(60)"]
    with pytest.raises(ChildServerError, match=r"(?s)not healthy after 1 s:\n.*still loading"):
        with served(cmd, f"http://127.0.0.1:{free_port()}/", timeout_s=1):
            pytest.fail("entered a server that never answered")
    assert _gone(int(pid_file.read_text()))


def test_stop_kills_a_server_that_ignores_sigterm_after_the_grace_period(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    process = start([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                           "print('ready', flush=True); time.sleep(60)"], log)
    _wait_for(log, "ready")  # SIGTERM is ignored from here on
    t0 = time.monotonic()
    stop(process, grace_s=0.5)
    assert process.returncode == -signal.SIGKILL and time.monotonic() - t0 >= 0.5


def test_a_group_stop_reaches_the_children_the_server_started(tmp_path: Path) -> None:
    log, pid_file = tmp_path / "parent.log", tmp_path / "child.pid"
    parent = (f"import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(c.pid)); print('started', flush=True); time.sleep(60)")
    alone = start([sys.executable, "-c", parent], log)
    _wait_for(log, "started")
    stop(alone, grace_s=0)
    orphan = int(pid_file.read_text())
    try:
        assert not _gone(orphan)  # without the group, the server's own child outlives it
    finally:
        os.kill(orphan, signal.SIGKILL)

    grouped = start([sys.executable, "-c", parent], log, group=True)
    _wait_for(log, "started")
    child = int(pid_file.read_text())
    stop(grouped, grace_s=0, group=True)
    for _ in range(100):
        if _gone(child):
            break
        time.sleep(0.05)
    assert grouped.returncode == -signal.SIGKILL and _gone(child)
