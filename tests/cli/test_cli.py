"""The `ragopt` command in real subprocesses: instant --help without heavy imports, one-line errors with exit
code 2, `eval --json` / `--save-run`, a no-op re-index that says so, and `sweep` gates and config errors."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fixtures.tiny_corpus import TINY_DOCS, TINY_QRELS, write_beir

HEAVY = ("torch", "sentence_transformers", "qdrant_client", "llama_cpp", "transformers", "bm25s", "rank_bm25")


def ragopt(*args: str, workspace: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAGOPT_HOME": str(workspace / "unused-home")}
    return subprocess.run(
        [sys.executable, "-m", "ragopt", "--workspace", str(workspace), *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=workspace.parent,
    )  # fmt: skip


def test_help_is_instant_and_imports_nothing_heavy(tmp_path: Path) -> None:
    probe = (
        "import json, sys, contextlib, io\n"
        "from ragopt.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit as e:\n"
        "        code = e.code\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(json.dumps({'code': code, 'heavy': heavy, 'help': out.getvalue()}))\n"
    )
    report = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)
    assert report["code"] == 0 and report["heavy"] == []
    assert all(name in report["help"] for name in ("index", "search", "eval", "sweep"))

    # CPU seconds of the whole process (interpreter start included): unlike wall time, immune to a busy
    # machine. About 0.3 s here; importing torch alone costs several seconds.
    cpu = min(_help_cpu_seconds(tmp_path) for _ in range(3))
    assert cpu < 1.0, f"ragopt --help used {cpu:.2f} CPU seconds"


def _help_cpu_seconds(tmp_path: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = ragopt("--help", workspace=tmp_path)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0 and "usage: ragopt" in done.stdout and done.stderr == ""
    assert wall < 5.0
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


BAD_INPUTS = {
    "malformed-jsonl": (dict(docs=[json.dumps(TINY_DOCS[0]), '{"_id": "d2", "text": oops}']), "corpus.jsonl", ":2"),
    "unknown-doc-in-qrels": (dict(qrels=[*TINY_QRELS[:2], ("q3", "d999", 1)]), "test.tsv", ":4"),
    "empty-corpus": (dict(docs=[], qrels=[]), "corpus.jsonl", "empty corpus"),
    "duplicate-doc-ids": (dict(docs=[*TINY_DOCS[:3], {"_id": "d1", "text": "again"}]), "corpus.jsonl", ":4"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line(tmp_path: Path, case: str) -> None:
    kwargs, file_name, where = BAD_INPUTS[case]
    dataset = write_beir(tmp_path / "bad", **kwargs)  # type: ignore[arg-type]
    done = ragopt("eval", "--dataset", str(dataset), "--retriever", "bm25", workspace=tmp_path / "ws")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert lines[0].startswith("ragopt eval: error: ") and file_name in lines[0] and where in lines[0]
    assert str(dataset) in lines[0]  # the full path, so the user can open the file


def test_unknown_retriever_is_an_argparse_error(tmp_path: Path) -> None:
    done = ragopt("eval", "--dataset", "x", "--retriever", "magic", workspace=tmp_path / "ws")
    assert done.returncode == 2 and "invalid choice" in done.stderr and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One cold `ragopt eval --json --save-run --traces` (hybrid) on the tiny dataset: build, embed, search."""
    root = tmp_path_factory.mktemp("cli-eval")
    dataset = write_beir(root / "tiny")
    ws = root / "ws"
    done = ragopt(
        "eval", "--dataset", str(dataset), "--retriever", "hybrid", "--json",
        "--save-run", str(root / "run.trec"), "--traces", str(root / "traces.jsonl"), workspace=ws,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {"done": done, "root": root, "dataset": dataset, "ws": ws}


def test_eval_json_prints_one_object_with_the_documented_keys(evaluated: dict[str, Any]) -> None:
    stdout = evaluated["done"].stdout
    assert len(stdout.strip().splitlines()) == 1
    out = json.loads(stdout)
    assert {"dataset", "retriever", "metrics", "latency_ms"} <= set(out)
    assert out["dataset"] == "tiny" and out["retriever"] == "hybrid" and out["n_queries"] == 8
    assert set(out["metrics"]) == {"ndcg@10", "recall@10", "recall@100", "mrr@10"}
    assert all(0.0 <= v <= 1.0 for v in out["metrics"].values())
    assert out["metrics"]["recall@100"] == 1.0  # 12 documents: every relevant one is ranked
    assert out["metrics"]["ndcg@10"] > 0.8 and out["metrics"]["mrr@10"] > 0.8  # the topics are unambiguous
    assert {"p50", "p95"} <= set(out["latency_ms"]) and 0 < out["latency_ms"]["p50"] <= out["latency_ms"]["p95"]
    assert "built index" in evaluated["done"].stderr and "embedded 12 texts" in evaluated["done"].stderr


def test_save_run_writes_trec_format(evaluated: dict[str, Any]) -> None:
    lines = (evaluated["root"] / "run.trec").read_text().splitlines()
    rows = [line.split() for line in lines]
    assert all(len(r) == 6 and r[1] == "Q0" and r[5] == "ragopt-hybrid-rrf" for r in rows)
    by_query: dict[str, list[list[str]]] = {}
    for r in rows:
        by_query.setdefault(r[0], []).append(r)
    assert sorted(by_query) == [f"q{i}" for i in range(1, 9)]
    for qid, rs in by_query.items():
        assert [int(r[3]) for r in rs] == list(range(1, len(rs) + 1))
        scores = [float(r[4]) for r in rs]
        assert scores == sorted(scores, reverse=True)
        assert len({r[2] for r in rs}) == len(rs) == 12  # each document once; the corpus has 12
    assert by_query["q8"][0][2] == "d8"
    traces = (evaluated["root"] / "traces.jsonl").read_text().splitlines()
    assert len(traces) == 8 and [s["name"] for s in json.loads(traces[0])["spans"]] == ["embed", "vector", "bm25", "fuse"]


def test_reindexing_embeds_nothing_and_says_so(evaluated: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    done = ragopt("index", "--dataset", str(evaluated["dataset"]), workspace=evaluated["ws"])
    assert done.returncode == 0, done.stderr
    assert "reused existing index" in done.stderr and "embedded 0 texts" in done.stderr
    assert "embedded 0" in done.stdout
    assert time.perf_counter() - t0 < 10


def test_sweep_with_an_unreachable_gate_exits_1_naming_gate_and_shortfall(evaluated: dict[str, Any]) -> None:
    done = ragopt(
        "sweep", "--dataset", str(evaluated["dataset"]), "--retrievers", "bm25", "--top-k", "1,3,10",
        "--gate", "recall@3>=1.5", "--out", str(evaluated["root"] / "sweep"), "--no-progress", workspace=evaluated["ws"],
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "no trial passes every gate" in done.stderr
    assert "recall@3>=1.5" in done.stderr and "passed by 0 of 3 trials" in done.stderr
    shortfall = [line for line in done.stderr.splitlines() if "closest trial" in line]
    assert shortfall and "needs >= 1.5" in shortfall[0] and "short by" in shortfall[0]
    assert (evaluated["root"] / "sweep" / "results.json").exists()


def test_sweep_config_with_an_unknown_key_exits_2_naming_it(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    config = tmp_path / "sweep.toml"
    config.write_text('retrievers = ["bm25"]\ntop_k = [1, 3]\nchunk_sizez = [64]\n', encoding="utf-8")
    done = ragopt("sweep", "--dataset", str(dataset), "--config", str(config), "--out", str(tmp_path / "out"), workspace=tmp_path / "ws")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "chunk_sizez" in lines[0] and str(config) in lines[0]
