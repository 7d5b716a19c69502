"""benchmarks/bench_synthetic.py's bookkeeping: --like examples are never scored queries, a finished (dataset,
arm) result is kept so a killed run resumes after it, and bad flags are one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_synthetic.py"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    return load_script(SCRIPT)


def queries(folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"query number {i}"}) + "\n"
                                                  for i in range(n)), encoding="utf-8")


def test_examples_come_from_unscored_queries_first_then_at_most_a_third_held_out(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    queries(tmp_path, 50)
    scored = [f"q{i}" for i in range(43)]  # like DL 2019: 43 judged, 7 not
    examples, left = bench.split_queries(tmp_path, scored, 40, seed=0)
    ids = [i for i, _ in examples]
    assert set(ids) >= {f"q{i}" for i in range(43, 50)} and len(ids) == 7 + 43 // 3
    assert not set(ids) & set(left) and set(ids) | set(left) == {f"q{i}" for i in range(50)}
    assert [t for _, t in examples] == [f"query number {i[1:]}" for i in ids]  # the text, nothing else
    many, left = bench.split_queries(tmp_path, scored[:10], 40, seed=0)  # enough outside: nothing held out
    assert left == scored[:10] and len(many) == 40 and not {i for i, _ in many} & set(scored[:10])
    assert bench.split_queries(tmp_path, scored, 40, seed=1)[0] != examples  # the seed picks them


def test_a_finished_result_is_reused_and_an_unfinished_one_computed(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "r" / "scifact-like-0.json"
    calls = []
    first = bench.cached(path, lambda: calls.append(1) or {"kendall_tau": 0.5})
    again = bench.cached(path, lambda: calls.append(1) or {"kendall_tau": 0.9})
    assert first == again == {"kendall_tau": 0.5} and calls == [1]
    assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize("flags, field", [(["--datasets", "nq"], "--datasets"), (["--arms", "both"], "--arms"),
                                          (["--chunk-sizes", "64,big"], "--chunk-sizes"), (["--examples", "0"], "--examples"),
                                          (["--data", "/nonexistent-labelled-sets"], "--data")])
def test_bad_flags_are_one_line(flags: list[str], field: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), *flags, "--workspace", str(tmp_path / "ws")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and f"[{field}]" in done.stderr, done.stderr
    assert not (tmp_path / "ws").exists()
