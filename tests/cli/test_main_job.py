"""The README's main job end to end, as a user runs it: `ragopt sweep` on the shipped hospital set with the
shipped config (extractive answers, convex fusion, tenant data), in a fresh process and a fresh workspace, at
the selected K only (K = 5: the full K grid adds minutes and no new code path), then again warm; and the same job
from a wheel built with pip and installed in a fresh venv, run in an empty folder. What it prints fits 120
columns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ragopt.eval.report_terminal import TABLE_WIDTH
from ragopt.shipped import shipped_config

REPO = Path(__file__).resolve().parents[2]
CONFIG = shipped_config()


def sweep(tmp_path: Path, out: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGOPT_HOME": str(tmp_path / "ws")}
    cmd = [sys.executable, "-m", "ragopt", "sweep", "--config", str(CONFIG), "--top-k", "5", "--out", str(tmp_path / out),
           "--no-progress", *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def checkout_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The main job from this checkout, cold: (its folder, the process)."""
    tmp_path = tmp_path_factory.mktemp("main-job")
    return tmp_path, sweep(tmp_path, "cold")


def assert_fits_the_terminal(done: subprocess.CompletedProcess[str]) -> None:
    """Every line printed fits the terminal; progress bars (a library's, drawn with "%|") aside."""
    lines = done.stdout.splitlines() + [line for line in done.stderr.splitlines() if "%|" not in line]
    wide = [line for line in lines if len(line) > TABLE_WIDTH]
    assert not wide, f"{len(wide)} lines over {TABLE_WIDTH} columns, e.g. {wide[0]!r}"


@pytest.mark.slow
def test_the_main_job_selects_the_cheapest_passing_trial_and_writes_its_outputs(
    checkout_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    tmp_path, cold = checkout_run
    assert cold.returncode == 0, cold.stderr[-3000:]
    assert_fits_the_terminal(cold)
    out = tmp_path / "cold"
    assert {p.name for p in out.iterdir()} >= {"results.json", "results.csv", "summary.md", "report.html"}
    results = json.loads((out / "results.json").read_text())
    trials = {t["id"]: t for t in results["trials"]}
    assert len(trials) == 4 * 4  # chunks of 64, 128, 256 and whole x dense, bm25, hybrid rrf, hybrid convex
    selected = trials[results["selected"]]
    assert all(v["passed"] for v in results["verdicts"][selected["id"]])
    passing = [t for t in trials.values() if all(v["passed"] for v in results["verdicts"][t["id"]])]
    assert selected["costs"]["context_tokens"] == min(t["costs"]["context_tokens"] for t in passing)
    # what the README reports: small chunks and hybrid retrieval at a fraction of whole documents' tokens
    assert selected["params"]["chunker"] == "64/16" and selected["params"]["retriever"] == "hybrid"
    whole = trials["whole_hybrid-rrf_k5"]["costs"]["context_tokens"]
    assert selected["costs"]["context_tokens"] < whole / 2
    assert {"citation_precision", "citation_recall", "string_presence", "rouge_l"} <= set(selected["metrics"])
    assert f"selected: {results['selected']}" in cold.stdout and results["selected"] in (out / "summary.md").read_text()

    warm = sweep(tmp_path, "warm")  # a fresh process on the same workspace: served from it
    assert warm.returncode == 0, warm.stderr[-3000:]
    again = json.loads((tmp_path / "warm" / "results.json").read_text())
    assert again["selected"] == results["selected"]
    assert {t["id"]: t["metrics"] for t in again["trials"]} == {t: trials[t]["metrics"] for t in trials}
    assert all(t["costs"]["latency_cached"] for t in again["trials"])


def build_wheel(into: Path) -> Path:
    """`pip wheel` of a clean copy of the sources (a checkout's build/ folder could leak stale files into it)."""
    src = into / "ragopt-source"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("ragopt", "evalsets", "pipelines"):  # the two shipped folders go into the package (pyproject.toml)
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(into),
                    str(src)], check=True, capture_output=True, text=True)
    return next(into.glob("ragopt-*.whl"))


def fresh_venv(path: Path, wheel: Path) -> Path:
    """A new venv where the wheel alone provides ragopt; its dependencies are this interpreter's (a .pth names
    its site-packages; that folder's own .pth files, such as an editable ragopt, are not read from it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install", "-q", "--no-deps",
                    str(wheel)], check=True, capture_output=True, text=True)
    site = next((path / "lib").glob("python3*/site-packages"))
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "ragopt_test_dependencies.pth").write_text("\n".join(deps) + "\n")
    return path


@pytest.mark.slow
def test_a_wheel_in_a_fresh_venv_runs_the_main_job_in_an_empty_folder_and_selects_as_the_checkout(
    checkout_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path,
) -> None:
    checkout_dir, cold = checkout_run
    assert cold.returncode == 0, cold.stderr[-3000:]
    expected = json.loads((checkout_dir / "cold" / "results.json").read_text())
    venv = fresh_venv(tmp_path / "venv", build_wheel(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAGOPT_HOME", "VIRTUAL_ENV")}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import ragopt; print(ragopt.__file__)"], cwd=empty,
                           env=env, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(venv)  # the wheel, not this checkout, provides ragopt

    done = subprocess.run([str(venv / "bin" / "ragopt"), "sweep", "--top-k", "5", "--no-progress"], cwd=empty, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_fits_the_terminal(done)
    results = json.loads((empty / "runs" / "sweep" / "results.json").read_text())
    assert Path(results["dataset"]["path"]).is_relative_to(venv)  # the set the wheel carries ...
    assert results["dataset"]["fingerprint"] == expected["dataset"]["fingerprint"]  # ... is the checkout's
    assert results["selected"] == expected["selected"]
    assert {t["id"]: t["metrics"] for t in results["trials"]} == {t["id"]: t["metrics"] for t in expected["trials"]}
    assert (empty / ".ragopt").is_dir()
