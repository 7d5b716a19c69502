"""ragopt/cli/_common.py: `ask` and `serve` with a saved plan (--from results.json) serve it as it was measured, so
every flag that would change the plan (chunking, embedder, retrieval, --top-k) is refused with one line naming it,
exit 2, even at its default value, while flags that do not touch the plan (port, caches, store, deadlines, the
knowledge base) stay allowed. The saved plan comes from a real one-trial sweep over the tiny corpus (bm25, whole
documents, top 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.serving import serve_options
from fixtures.tiny_corpus import write_beir


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from ragopt.data import load_evalset
    from ragopt.eval.sweep import SweepConfig, run_sweep

    root = tmp_path_factory.mktemp("saved-plan")
    dataset = write_beir(root / "tiny")
    config = SweepConfig.model_validate({"dataset": str(dataset), "chunk_sizes": ["whole"], "retrievers": ["bm25"],
                                         "top_k": [3], "answer_metrics": []})
    outcome = run_sweep(load_evalset(dataset), config, root / "ws", progress=False)
    return {"results": outcome.results.save(root / "results.json"), "dataset": dataset, "root": root}


PLAN_FLAGS = {
    "--chunk-size": ["--chunk-size", "64"],
    "--whole-docs": ["--whole-docs"],
    "--chunk-overlap": ["--chunk-overlap", "8"],
    "--embedder": ["--embedder", "multilingual-e5-small"],
    "--device": ["--device", "cpu"],
    "--retriever": ["--retriever", "dense"],
    "--langchain": ["--langchain", "my_module:retriever"],
    "--fusion": ["--fusion", "convex"],
    "--alpha": ["--alpha", "0.3"],
    "--bm25-backend": ["--bm25-backend", "rank_bm25"],
    "--analyzer": ["--analyzer", "whitespace"],
    "--top-k": ["--top-k", "7"],
    "--top-k at its default": ["--top-k", "5"],  # given is given, whatever the value
    "--retriever at its default": ["--retriever", "auto"],
}
COMMANDS = {
    "ask": lambda flags: ["ask", *flags, "what is the capital?"],
    # a keys file that does not exist: were the flag let through, serve would stop there (another line), not listen
    "serve": lambda flags: ["serve", "--api-keys", "missing-keys.json", *flags],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("flag", list(PLAN_FLAGS))
def test_a_plan_flag_with_from_is_refused_naming_it(flag: str, command: str, swept: dict[str, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from ragopt.cli import main

    argv = COMMANDS[command](["--from", str(swept["results"]), *PLAN_FLAGS[flag]])
    flag = PLAN_FLAGS[flag][0]
    code = main(["--workspace", str(swept["root"] / "ws"), *argv])
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert code == 2 and len(err) == 1 and out.out == "", out
    assert err[0].startswith(f"ragopt {command}: error: [{flag}]: ") and "served as it was measured" in err[0], err


def test_flags_that_do_not_change_the_plan_are_allowed_with_from(swept: dict[str, Path],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from ragopt.cli import main
    from ragopt.plan import load_plan

    saved = load_plan(swept["results"])
    opts = serve_options(["--from", str(swept["results"]), "--port", "9001", "--no-cache", "--cache-ttl", "5",
                          "--qdrant-url", "http://127.0.0.1:6333", "--dataset", str(swept["dataset"]), "--slots", "2",
                          "--deadline", "30", "--queue-timeout", "3"])
    assert opts.plan == saved.plan and opts.plan.retrieval.top_k == 3 and opts.store.url == "http://127.0.0.1:6333"
    code = main(["--workspace", str(swept["root"] / "ws"), "ask", "--from", str(swept["results"]), "--no-stream",
                 "--tenant", "acme", "--deadline", "30", "what is the capital?"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "error" not in out.err
