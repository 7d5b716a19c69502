"""The collection-status service the shipped hospital set's tool questions ask: ingestion runs per job and tenant
(when, status, rows, failure reason, and the sensitive fields a real run log carries: the patient record it
stopped at, the operator on call, free-text notes) in SQLite, behind a small FastAPI app.

    python -m ragopt.backends.collection_status --runs RUNS.jsonl --port 8123 [--delay-s 3]

- `POST /status {"job", "tenant"}`: the job's latest run for that tenant (a list of one record, or none);
- `POST /runs {record}`: an ingestion run just finished (what makes the status change between two calls);
- `GET /health`.
`--delay-s` holds every status answer that long: the fault a slow tool is, injected into the real service.
`collection_status_service(...)` runs it as a child process (ragopt.backends.child_server) and stops it on close.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

COLUMNS = ("run_id", "job", "tenant", "started_at", "status", "rows_loaded", "failure_reason", "patient_id",
           "operator", "notes")
# What a status record holds, as the tool stage's JSON schema (the fields redaction and pruning may name).
SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"type": "object", "properties": {
        "run_id": {"type": "string"}, "job": {"type": "string"}, "tenant": {"type": "string"},
        "started_at": {"type": "string", "description": "UTC, ISO 8601"},
        "status": {"type": "string", "enum": ["succeeded", "failed", "running"]},
        "rows_loaded": {"type": "integer"}, "failure_reason": {"type": ["string", "null"]},
        "patient_id": {"type": ["string", "null"], "description": "the patient record the run stopped at"},
        "operator": {"type": "string", "description": "the engineer on call"},
        "notes": {"type": ["string", "null"], "description": "free text"},
    }},
}


class RunStore:
    """Runs in one SQLite file; one connection per call (the app serves from worker threads)."""

    def __init__(self, path: Path):
        self.path = path
        with self._connect() as db:
            db.execute(f"CREATE TABLE IF NOT EXISTS runs ({', '.join(COLUMNS)}, PRIMARY KEY (run_id))")
            db.execute("CREATE INDEX IF NOT EXISTS by_job ON runs (job, tenant, started_at)")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10)
        db.row_factory = sqlite3.Row
        return db

    def add(self, runs: list[dict[str, Any]]) -> None:
        with self._connect() as db:
            db.executemany(f"INSERT OR REPLACE INTO runs VALUES ({', '.join('?' * len(COLUMNS))})",
                           [tuple(r.get(c) for c in COLUMNS) for r in runs])

    def latest(self, job: str, tenant: str | None) -> list[dict[str, Any]]:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE job = ? AND tenant IS ? ORDER BY started_at DESC LIMIT 1",
                             (job, tenant)).fetchone()
        return [dict(row)] if row is not None else []


def read_runs(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class StatusRequest(BaseModel):
    job: str
    tenant: str | None = None


def make_app(store: RunStore, delay_s: float = 0.0) -> Any:
    from fastapi import FastAPI

    app = FastAPI(title="collection status")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/status")
    def status(request: StatusRequest) -> list[dict[str, Any]]:
        if delay_s:
            time.sleep(delay_s)
        return store.latest(request.job, request.tenant)

    @app.post("/runs")
    def record(run: dict[str, Any]) -> dict[str, str]:
        store.add([run])
        return {"run_id": str(run.get("run_id"))}

    return app


class CollectionStatusService:
    """The service as a child process on a free port, over a fresh SQLite file loaded from `runs`; `close()` stops it."""

    def __init__(self, runs: Path, *, delay_s: float = 0.0, start_timeout_s: float = 30.0):
        from ragopt.backends import child_server

        self._dir = tempfile.TemporaryDirectory(prefix="collection-status-")
        port = child_server.free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", __name__, "--runs", str(runs), "--db", str(Path(self._dir.name) / "runs.db"),
               "--port", str(port), "--delay-s", str(delay_s)]
        self._served = child_server.served(cmd, f"{self.url}/health", timeout_s=start_timeout_s, name="collection status",
                                           log=Path(self._dir.name) / "service.log", grace_s=5)
        self.process = self._served.__enter__()
        self._lock = threading.Lock()

    @property
    def status_url(self) -> str:
        return f"{self.url}/status"

    def close(self) -> None:
        with self._lock:
            if self._served is not None:
                self._served.__exit__(None, None, None)
                self._served = None
                self._dir.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ragopt.backends.collection_status", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="JSONL of ingestion runs to load")
    parser.add_argument("--db", type=Path, required=True, help="the SQLite file (created)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-s", type=float, default=0.0, help="hold every status answer this long (fault injection)")
    args = parser.parse_args(argv)
    import uvicorn

    store = RunStore(args.db)
    store.add(read_runs(args.runs))
    uvicorn.run(make_app(store, args.delay_s), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
