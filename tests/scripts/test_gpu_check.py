"""benchmarks/gpu_check.sh refuses bad knobs with one line, exit 2, before any work; its report step merges the
steps' JSON, keeps a failed step's exit status and log tail, and writes a CPU reference only from a CPU run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": sys.executable, **env})


def test_the_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


@pytest.mark.parametrize("env, args, named", [
    ({"DOCS": "many"}, (), "DOCS"),
    ({"QUESTIONS": "0"}, (), "QUESTIONS"),
    ({"STEPS": "env bogus"}, (), "STEPS"),
    ({}, ("frobnicate",), "frobnicate"),
    ({"STEPS": "embed", "DATASET": "/nonexistent/scifact"}, (), "DATASET"),
])
def test_bad_input_is_one_line_and_exit_2(env: dict[str, str], args: tuple[str, ...], named: str) -> None:
    done = run(*args, **env)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and named in done.stderr
    assert done.stdout == ""


def steps_folder(tmp_path: Path, device: str) -> Path:
    folder = tmp_path / "steps"
    folder.mkdir()
    (folder / "env.json").write_text(json.dumps({"device": device, "cpu_count": 2, "llama_cpp": {"version": "0.3.36"}}))
    (folder / "embed.json").write_text(json.dumps({"device": device, "docs": 10, "ndcg_at_10": 0.5, "texts_per_s": 20.0}))
    (folder / "generate.json").write_text("")  # the step died before printing its JSON
    (folder / "generate.log").write_text("Traceback ...\nRuntimeError: CUDA error: out of memory\n")
    (folder / "_steps.tsv").write_text("env\t1\t0\nembed\t30\t0\ngenerate\t5\t1\n")
    return folder


def report(folder: Path, out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_steps.py"), "report", "--steps", str(folder),
                           "--out", str(out), *more], capture_output=True, text=True, timeout=60)


def test_report_keeps_a_failed_step_and_says_what_it_ran_on(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    done = report(steps_folder(tmp_path, "NVIDIA H200"), out)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["ran_on"] == "NVIDIA H200"
    assert data["step_seconds"] == {"env": 1.0, "embed": 30.0, "generate": 5.0}
    assert data["embed"]["ndcg_at_10"] == 0.5
    assert data["generate"]["error"] == "exit 1" and "out of memory" in data["generate"]["log_tail"]
    assert "generate: FAILED exit 1" in done.stdout


def test_a_reference_comes_from_a_cpu_run_only(tmp_path: Path) -> None:
    ref = tmp_path / "ref.json"
    done = report(steps_folder(tmp_path, "NVIDIA H200"), tmp_path / "out.json", "--write-reference", str(ref))
    assert done.returncode == 2 and "CPU run only" in done.stderr and not ref.exists()
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    done = report(steps_folder(cpu, "cpu"), tmp_path / "out.json", "--write-reference", str(ref))
    assert done.returncode == 2 and "must both succeed" in done.stderr and not ref.exists()
