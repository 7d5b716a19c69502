"""`ragopt judge` in real subprocesses: the JSON it prints for the support, llama (the tiny GGUF) and http (a real
llama-server) judges, re-runs served from the cache, and one-line refusals of bad input before any work."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ragopt.backends.llama_server import LlamaServer, find_binary

ROWS = [
    {"id": "q1", "question": "Where is the Eiffel Tower?", "reference": "Paris",
     "passages": ["The Eiffel Tower is in Paris and opened in 1889.", "Gustave Eiffel's company built the tower."],
     "answer": "The Eiffel Tower is in Paris [1]. Penguins live in Antarctica colonies."},
    {"id": 2, "question": "Who built it?", "passages": [{"title": "Tower", "text": "Gustave Eiffel's company built the tower."}],
     "answer": "Gustave Eiffel's company built the tower."},
]


def ragopt(*args: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAGOPT_HOME": str(workspace / "unused-home")}
    return subprocess.run([sys.executable, "-m", "ragopt", "--workspace", str(workspace), *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=workspace.parent)


def write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def judged(done: subprocess.CompletedProcess[str]) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_support_judge_prints_items_and_summary_and_a_rerun_makes_no_call(tmp_path: Path) -> None:
    data = write(tmp_path / "in.jsonl", ROWS)
    first = judged(ragopt("judge", "--input", str(data), "--judge", "support", "--json", workspace=tmp_path / "ws"))
    q1, q2 = first["items"]
    assert q1["id"] == "q1" and q1["faithfulness"] == 0.5
    assert q1["sentences"] == [{"text": "The Eiffel Tower is in Paris.", "supported": True},
                               {"text": "Penguins live in Antarctica colonies.", "supported": False}]
    assert q1["unsupported"] == ["Penguins live in Antarctica colonies."] and q1["answer_correctness"] == 1.0
    assert q2["id"] == "2" and q2["faithfulness"] == 1.0 and q2["answer_correctness"] is None
    s = first["summary"]
    assert s["faithfulness"] == 0.75 and s["judge_failures"] == 0 and s["calls"] == 6 and s["cached"] == 0
    assert {"tokens", "seconds"} <= set(s)
    again = judged(ragopt("judge", "--input", str(data), "--judge", "support", "--json", workspace=tmp_path / "ws"))
    assert again["summary"]["calls"] == 0 and again["summary"]["cached"] == 6
    assert again["items"] == first["items"]


def test_llama_judge_gives_a_readable_verdict_for_every_sentence(tmp_path: Path, tiny_gguf: Path) -> None:
    data = write(tmp_path / "in.jsonl", ROWS)
    out = judged(ragopt("judge", "--input", str(data), "--judge", "llama", "--model", str(tiny_gguf), "--json",
                        workspace=tmp_path / "ws"))
    assert out["summary"]["judge_failures"] == 0 and out["summary"]["calls"] == 6 and out["summary"]["tokens"] > 0
    assert all(s["supported"] in (True, False) for item in out["items"] for s in item["sentences"])
    again = judged(ragopt("judge", "--input", str(data), "--judge", "llama", "--model", str(tiny_gguf), "--json",
                          workspace=tmp_path / "ws"))
    assert again["summary"]["calls"] == 0 and again["items"] == out["items"]


@pytest.mark.skipif(find_binary() is None and not os.environ.get("CI"), reason="llama-server not built (scripts/build_llama_server.sh)")
def test_http_judge_against_a_real_llama_server_reads_every_verdict(tmp_path: Path, tiny_gguf: Path) -> None:
    data = write(tmp_path / "in.jsonl", ROWS)
    with LlamaServer(tiny_gguf, ctx_per_slot=1024) as server:
        out = judged(ragopt("judge", "--input", str(data), "--judge-url", server.base_url + "/v1", "--json",
                            workspace=tmp_path / "ws"))
    assert out["summary"]["judge"] == f"http:{server.base_url}"
    assert out["summary"]["calls"] == 6 and out["summary"]["judge_failures"] == 0 and out["summary"]["tokens"] > 0
    assert all(s["supported"] in (True, False) for item in out["items"] for s in item["sentences"])


@pytest.mark.parametrize("missing", ["passages", "answer"])
def test_a_line_without_passages_or_answer_is_one_line_naming_file_and_line(tmp_path: Path, missing: str) -> None:
    bad = {k: v for k, v in ROWS[1].items() if k != missing}
    data = write(tmp_path / "in.jsonl", [ROWS[0], bad])
    done = ragopt("judge", "--input", str(data), "--judge", "support", workspace=tmp_path / "ws")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and f"{data}:2" in done.stderr and f'missing "{missing}"' in done.stderr


def test_an_unreachable_judge_url_is_one_line_naming_the_flag_before_any_work(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    data = write(tmp_path / "in.jsonl", ROWS)
    done = ragopt("judge", "--input", str(data), "--judge", "http", "--judge-url", f"http://127.0.0.1:{port}",
                  workspace=tmp_path / "ws")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "[--judge-url]" in done.stderr and "cannot reach" in done.stderr


def test_sweep_with_a_judge_prints_intervals_and_refuses_a_budget_below_the_projection(tmp_path: Path) -> None:
    from fixtures.tiny_corpus import write_beir

    dataset = write_beir(tmp_path / "tiny")
    args = ("sweep", "--dataset", str(dataset), "--retrievers", "bm25", "--top-k", "3", "--set", "generate.generator=extractive",
            "--judge", "support", "--out", str(tmp_path / "out"), "--no-progress")
    refused = ragopt(*args, "--judge-max-calls", "1", workspace=tmp_path / "ws")
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0
    assert refused.stderr.startswith("ragopt sweep: error: [--judge-max-calls]: at least ")
    assert not (tmp_path / "ws" / "indexes").exists() and not (tmp_path / "out").exists()
    done = ragopt(*args, workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    assert "judged whole_bm25_k3: faithfulness " in done.stdout and "judge support: at least" in done.stderr
    again = ragopt(*args, workspace=tmp_path / "ws")
    assert " 0 calls (" in again.stdout
