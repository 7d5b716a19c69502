"""The plan is the only door: `ragopt serve --model X ...` and `ragopt serve --from results.json` of the trial a
sweep measured with that model build the same pipeline through ragopt.plan, so they give the same answers (text,
citations, hits, the model id in every answer-cache key) to the same questions. The options come from the real
`ragopt serve` parser; llama.cpp runs the tiny GGUF, greedily."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures.serving import running_service, serve_options
from fixtures.tiny_corpus import TINY_QUERIES

STAFF = {"Authorization": "Bearer key-acme-staff"}
QUESTIONS = [q["text"] for q in TINY_QUERIES[:4]]


@pytest.fixture(scope="module")
def results(tiny_gguf: Path, serve_files: dict[str, Path]) -> Path:
    """A one-trial sweep answering with the tiny GGUF (max_tokens 24) over bm25, top 3, whole documents."""
    from ragopt.data import load_evalset
    from ragopt.eval.sweep import SweepConfig, run_sweep

    root = serve_files["root"]
    config = SweepConfig.model_validate({
        "dataset": str(serve_files["dataset"]), "chunk_sizes": ["whole"], "retrievers": ["bm25"], "top_k": [3],
        "answer_metrics": [], "stages": {"generate": {"generator": "llama", "model": str(tiny_gguf), "max_tokens": 24}}})
    outcome = run_sweep(load_evalset(serve_files["dataset"]), config, root / "ws-flags", progress=False)
    return outcome.results.save(root / "flags-results.json")


def _answers(opts: Any, workspace: Path, keys: Path) -> tuple[list[dict[str, Any]], str]:
    with running_service(opts, workspace, keys) as (url, service):
        out = [httpx.post(f"{url}/v1/ask", json={"question": q, "stream": False}, headers=STAFF, timeout=120).json()
               for q in QUESTIONS]
        return out, service.backends["default"].model_id


def test_serve_model_and_serve_from_of_the_same_trial_answer_alike(tiny_gguf: Path, serve_files: dict[str, Path],
                                                                   results: Path, tmp_path: Path) -> None:
    flags = serve_options(["--dataset", str(serve_files["dataset"]), "--whole-docs", "--retriever", "bm25", "--top-k", "3",
                           "--model", str(tiny_gguf), "--max-tokens", "24", "--no-cache"])
    saved = serve_options(["--from", str(results), "--no-cache"])
    assert flags.saved is None and saved.saved is not None  # the one difference: where the plan came from
    by_flags, flags_model = _answers(flags, tmp_path / "ws-a", serve_files["keys"])
    by_trial, trial_model = _answers(saved, tmp_path / "ws-b", serve_files["keys"])
    assert flags_model == trial_model and flags_model.startswith("llama:")
    assert any(a["answer"] for a in by_flags)
    for a, b in zip(by_flags, by_trial):
        assert (a["answer"], a["citations"], a["trace"]["hits"]) == (b["answer"], b["citations"], b["trace"]["hits"])
        assert a["trace"]["hits"] and a["trace"]["tokens_out"] > 0  # retrieved, and the model generated


def test_a_flag_that_would_change_a_saved_plan_is_refused(results: Path) -> None:
    from ragopt.errors import InputError

    with pytest.raises(InputError) as refused:
        serve_options(["--from", str(results), "--max-tokens", "64"])
    assert refused.value.field == "--max-tokens" and "served as it was measured" in refused.value.message


def test_small_max_words_without_a_small_model_is_refused_not_ignored(tiny_gguf: Path) -> None:
    from ragopt.errors import InputError

    with pytest.raises(InputError) as refused:
        serve_options(["--model", str(tiny_gguf), "--small-max-words", "12"])
    assert refused.value.field == "--small-max-words"
    routed = serve_options(["--model", str(tiny_gguf), "--small-model", str(tiny_gguf), "--small-max-words", "12"])
    default = serve_options(["--model", str(tiny_gguf), "--small-model", str(tiny_gguf)])
    assert (routed.settings.small_max_words, default.settings.small_max_words) == (12, 8)
