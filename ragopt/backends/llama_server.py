"""llama.cpp's `llama-server` as a child process: started on a loopback port, health-checked, stopped.

The binary comes from `scripts/build_llama_server.sh` (cached under ~/.cache/ragopt/llama-server-VERSION/),
`$RAGOPT_LLAMA_SERVER`, or PATH. `-c` is the server's whole KV context, shared by its `--parallel` slots, so
`LlamaServer(ctx_per_slot=2048, parallel=4)` passes `-c 8192`: each request gets the context the in-process
backend would give it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ragopt.backends import child_server
from ragopt.errors import ChildServerError, InputError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the llama.cpp sources the binary is built from (its vendored copy)


def find_binary(explicit: str | Path | None = None) -> Path | None:
    """The llama-server binary: `explicit`, $RAGOPT_LLAMA_SERVER, the build script's cache, then PATH."""
    candidates = [explicit, os.environ.get("RAGOPT_LLAMA_SERVER"),
                  Path.home() / ".cache" / "ragopt" / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}" / "bin" / "llama-server",
                  shutil.which("llama-server")]
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return Path(c)
    return None


class LlamaServer:
    """`with LlamaServer(model, parallel=4) as srv: srv.base_url` - or `start()` / `stop()` / `restart()`."""

    def __init__(
        self,
        model: str | Path,
        *,
        parallel: int = 1,
        threads: int = 1,
        ctx_per_slot: int = 2048,
        port: int | None = None,
        binary: str | Path | None = None,
        extra_args: tuple[str, ...] = (),
        startup_timeout_s: float = 60.0,
    ):
        if parallel < 1 or threads < 1 or ctx_per_slot < 1:
            raise InputError("parallel, threads and ctx_per_slot must be >= 1", field="--parallel")
        found = find_binary(binary)
        if found is None:
            raise InputError("llama-server not found: run scripts/build_llama_server.sh, or set $RAGOPT_LLAMA_SERVER",
                             field="--engine")
        if not Path(model).is_file():
            raise InputError("model file not found", path=model, field="--model")
        self.binary = found
        self.model = Path(model)
        self.parallel = parallel
        self.threads = threads
        self.ctx_per_slot = ctx_per_slot
        self.port = port
        self.extra_args = tuple(extra_args)
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.binary), "--model", str(self.model), "--parallel", str(self.parallel),
            "-t", str(self.threads), "-tb", str(self.threads), "-c", str(self.ctx_per_slot * self.parallel),
            "--host", "127.0.0.1", "--port", str(self.port), "--no-webui", *self.extra_args,
        ]

    def start(self) -> "LlamaServer":
        if self.process is not None and self.process.poll() is None:
            return self
        if self.port is None:
            self.port = child_server.free_port()
        fd, log = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(fd)
        self.log_path = Path(log)
        self.process = child_server.start(self.command(), self.log_path, die_with_parent=True)
        self.wait_healthy()
        return self

    def healthy(self) -> bool:
        return child_server.answers(f"{self.base_url}/health")

    def wait_healthy(self) -> None:
        """Until /health answers; on a timeout the server is stopped (ChildServerError, a RuntimeError, either way)."""
        assert self.process is not None, "start() first"
        try:
            child_server.wait_healthy(self.process, f"{self.base_url}/health", self.log_path,
                                      timeout_s=self.startup_timeout_s, name="llama-server")
        except ChildServerError:
            if self.process.poll() is None:
                self.stop()
            raise

    def log_tail(self, n: int = 20) -> str:
        return child_server.output_tail(self.log_path, n)

    def kill(self) -> None:
        """Kill it hard (a crash, for fault-injection tests); `start()` brings it back on the same port."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self, timeout_s: float = 10.0) -> None:
        p, self.process = self.process, None
        if p is not None:
            child_server.stop(p, grace_s=timeout_s)
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path = None

    def restart(self) -> "LlamaServer":
        self.stop()
        return self.start()

    def close(self) -> None:
        """What `Resources.close()` calls: the child stops with the process's other resources."""
        self.stop()

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
