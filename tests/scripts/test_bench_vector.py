"""benchmarks/bench_vector.py's flags: every shard shape asked for is built (each quantization with each m and
ef_construct), and a bad flag is one line naming it, exit 2, before anything is embedded or built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_vector.py"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    return load_script(SCRIPT)


def test_one_shard_per_quantization_m_and_ef_construct(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "corpus.jsonl").write_text("", encoding="utf-8")
    args = bench.parse_args(["--dataset", str(tmp_path), "--edge", "int8,none", "--hnsw-m", "16,32", "--hnsw-ef-construct", "256"])
    assert bench.check_args(args) is None
    assert [bench.shard_name(s) for s in args.shards] == [
        "qdrant-edge-int8-m16-efc256", "qdrant-edge-int8-m32-efc256", "qdrant-edge-none-m16-efc256", "qdrant-edge-none-m32-efc256"]
    config = bench.edge_config(args.shards[1], ef=512)
    assert (config.hnsw_m, config.hnsw_ef_construct, config.hnsw_ef, config.quantization) == (32, 256, 512, "int8")
    default = bench.parse_args(["--dataset", str(tmp_path)])
    assert bench.check_args(default) is None and len(default.shards) == 1  # the store's own default shard
    assert (default.shards[0]["m"], default.shards[0]["ef_construct"]) == (bench.DEFAULT_STORE.hnsw_m, bench.DEFAULT_STORE.hnsw_ef_construct)


@pytest.mark.parametrize("flags, field", [(["--hnsw-m", "16,2"], "--hnsw-m"), (["--hnsw-ef-construct", "big"], "--hnsw-ef-construct"),
                                          (["--ef", "0"], "--ef"), (["--oversampling", "32"], "--oversampling"),
                                          (["--edge", "int4"], "--edge"), (["--passages", "0"], "--passages"), (["--dataset", "/nonexistent-beir"], "--dataset")])
def test_bad_flags_are_one_line(flags: list[str], field: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *flags, "--workspace", str(tmp_path / "ws")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and done.stderr.startswith(f"bench_vector: {field}"), done.stderr
    assert not (tmp_path / "ws").exists()
