"""RAGOPT_REQUIRE_ALL: in CI a missing declared dependency fails the suite instead of skipping quietly.

Each case runs pytest in a subprocess on a small test file; the module is made missing inside that
process (a None entry in sys.modules is what Python reports as "not installed").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

MODULE_LEVEL = '''
import sys
import pytest
sys.modules["llama_cpp"] = None
pytest.importorskip("llama_cpp")

def test_generates():
    pass
'''

IN_A_TEST = '''
import sys
import pytest
sys.modules["ragas"] = None

def test_scores_answers():
    pytest.importorskip("ragas")

def test_needs_a_dataset():
    pytest.skip("../shared/data/scifact is absent")
'''


def run_pytest(tmp_path: Path, source: str, require_all: bool) -> subprocess.CompletedProcess[str]:
    test_file = tmp_path / "test_case.py"
    test_file.write_text(source, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    env.pop("RAGOPT_REQUIRE_ALL", None)
    if require_all:
        env["RAGOPT_REQUIRE_ALL"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "fixtures.require_all", "-p", "no:cacheprovider", str(test_file)]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("require_all", [False, True])
def test_module_level_skip_for_a_missing_dependency(tmp_path: Path, require_all: bool) -> None:
    proc = run_pytest(tmp_path, MODULE_LEVEL, require_all)
    out = proc.stdout + proc.stderr
    if require_all:
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, out  # a collection error stops the run
        assert "RAGOPT_REQUIRE_ALL is set and a declared dependency is missing" in out and "llama_cpp" in out
    else:
        assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, out  # the whole module skipped
        assert "1 skipped" in out and "error" not in out.lower()


def test_in_test_skip_fails_but_a_missing_dataset_still_skips(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, IN_A_TEST, require_all=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 failed" in out and "1 skipped" in out
    assert "FAILED" in out and "test_scores_answers" in out and "ragas" in out


def test_ray_is_declared_as_a_word_only() -> None:
    from fixtures.require_all import _DECLARED

    assert _DECLARED.search("could not import 'ray': No module named 'ray'")
    assert not _DECLARED.search("an array of floats") and not _DECLARED.search("pyarrow is absent")
