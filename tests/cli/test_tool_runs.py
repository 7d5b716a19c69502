"""`ragopt sweep` and `ragopt ask` with the tool stage, as a user runs them: bad tool settings are one line naming the
config key (exit 2, before any work), and no redacted value reaches any prompt, trace, log, cache file or results
file of a run (every file those runs leave, and what they print, is searched)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragopt.backends.collection_status import SCHEMA
from ragopt.shipped import shipped_collection_runs, shipped_dataset

REPO = Path(__file__).resolve().parents[2]


def _ragopt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "ragopt", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def _config(tmp_path: Path, dataset: Path, tool: str, **extra: str) -> Path:
    lines = [f'dataset = "{dataset}"', 'chunk_sizes = [64]', 'retrievers = ["bm25"]', "top_k = [5]",
             'answers = "extractive"', "answer_metrics = []", "", "[stages.tool]", tool,
             *(f"{k} = {v}" for k, v in extra.items())]
    path = tmp_path / "tools.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("tool, key", [
    ('tool = "no_such_module:status"', "stages.tool.tool"),
    ('url = "http://127.0.0.1:9/status"\nresult_schema = \'{"type": "object", "properties": \'', "stages.tool.result_schema"),
    ('service = "collection-status"\ntimeout_s = 0', "stages.tool.timeout_s"),
    ('service = "collection-status"\nredact_fields = ["patient_id", "social_security_no"]', "stages.tool.redact_fields"),
])
def test_bad_tool_settings_are_one_line_naming_the_key(tmp_path: Path, tool: str, key: str) -> None:
    config = _config(tmp_path, shipped_dataset() / "tool_questions.jsonl", tool)
    done = _ragopt("--workspace", str(tmp_path / "ws"), "sweep", "--config", str(config), "--out", str(tmp_path / "out"),
                   cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and key in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def _secrets() -> set[str]:
    runs = [json.loads(line) for line in shipped_collection_runs().read_text(encoding="utf-8").splitlines() if line]
    fields = [f for f in ("patient_id", "operator", "notes") if f in SCHEMA["items"]["properties"]]
    return {r[f] for r in runs for f in fields if r.get(f)}


def test_no_redacted_value_reaches_a_prompt_trace_log_cache_or_result(tmp_path: Path) -> None:
    data = tmp_path / "set"
    data.mkdir()
    (data / "corpus.jsonl").write_bytes((shipped_dataset() / "corpus.jsonl").read_bytes())
    questions = (shipped_dataset() / "tool_questions.jsonl").read_text(encoding="utf-8").splitlines()
    (data / "questions.jsonl").write_text("\n".join(questions[::4]) + "\n", encoding="utf-8")  # 12 of 47, both languages
    config = _config(tmp_path, data, 'service = "collection-status"', call='["rule"]', prune="[true, false]")
    ws, out = tmp_path / "ws", tmp_path / "out"
    sweep = _ragopt("--workspace", str(ws), "sweep", "--config", str(config), "--out", str(out), "--save-runs",
                    "--no-progress", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr
    first = json.loads(questions[0])
    ask = _ragopt("--workspace", str(ws), "ask", "--from", str(out / "results.json"), "--trial",
                  json.loads((out / "results.json").read_text())["trials"][1]["id"], "--tenant", first["tenant"],
                  *(a for s in first["scopes"] for a in ("--scope", s)), first["question"], cwd=tmp_path)
    assert ask.returncode == 0, ask.stderr
    assert "Live data (collection_status, read" in ask.stdout  # the tool answered, and its data reached the answer
    printed = (sweep.stdout + sweep.stderr + ask.stdout + ask.stderr).encode()
    files = [p for root in (ws, out, tmp_path) for p in root.rglob("*") if p.is_file() and p.parent != data]
    assert len(files) > 5 and any(p.name == "results.json" for p in files)
    secrets = _secrets()
    assert len(secrets) > 50
    leaked = {}
    for secret in secrets:
        forms = {secret.encode(), json.dumps(secret).strip('"').encode()}  # as written, and as JSON escapes it
        for name, blob in [("printed", printed), *((str(p), p.read_bytes()) for p in files)]:
            if any(form in blob for form in forms):
                leaked.setdefault(secret, []).append(name)
    assert leaked == {}
