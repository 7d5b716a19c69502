"""Two real `ragopt serve` processes on one real Redis share the answer cache and the rate limits."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from fixtures.serving import serve_process

STAFF = {"Authorization": "Bearer key-acme-staff"}


@pytest.mark.slow  # two ragopt processes start: about 25 s on 2 busy cores
def test_two_serve_processes_share_the_answer_cache_and_rate_limits(fresh_redis: str, serve_files: dict[str, Path], tmp_path: Path) -> None:
    common = ["--dataset", str(serve_files["dataset"]), "--retriever", "bm25", "--api-keys", str(serve_files["keys"]),
              "--engine", "extractive", "--redis", fresh_redis, "--key-rate", "0.01", "--key-burst", "3"]
    # separate workspaces: nothing is shared on disk, only through Redis
    with serve_process(common, tmp_path / "a") as a, serve_process(common, tmp_path / "b") as b:
        body = {"question": "What causes ocean tides?"}
        first = httpx.post(f"{a}/v1/ask", json=body, headers=STAFF, timeout=60).json()
        second = httpx.post(f"{b}/v1/ask", json=body, headers=STAFF, timeout=60).json()
        assert first["trace"]["cache"]["answer"] is False
        assert second["trace"]["cache"]["answer"] is True and second["answer"] == first["answer"]
        assert httpx.post(f"{a}/v1/ask", json=body, headers=STAFF, timeout=60).status_code == 200
        refused = httpx.post(f"{b}/v1/ask", json=body, headers=STAFF, timeout=60)  # the 4th request of a burst of 3
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
