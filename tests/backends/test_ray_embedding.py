"""`ragopt index --executor ray` on a local two-node Ray cluster: the same index as the local build (same id and
chunks, vectors within 1e-5, the same search results), its texts embedded on both nodes and cached by the driver;
a cluster address that does not answer, and a worker whose model differs, are one line. Skips where ray is not
installed, which in CI (RAGOPT_REQUIRE_ALL=1) fails instead."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fixtures.cli import one_line_error, ragopt
from fixtures.paths import REPO_ROOT as REPO

ray = pytest.importorskip("ray")

from ragopt.backends.embeddings import Embedder  # noqa: E402
from ragopt.backends.ray_embedding import embed_piece  # noqa: E402
from ragopt.config import EmbedderConfig  # noqa: E402
from ragopt.errors import InputError  # noqa: E402
from ragopt.index import open_index  # noqa: E402

DOCS = 120  # the shipped hospital set's first documents: about 150 chunks of 128 tokens, seconds to embed


@pytest.fixture(scope="module")
def cluster() -> Any:
    """A head node and one worker node, one CPU each, on this machine."""
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    yield nodes
    nodes.shutdown()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, cluster: Any) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ray-index")
    lines = (REPO / "evalsets" / "hospital" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:DOCS]
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ("index", "--docs", str(corpus), "--chunk-size", "128")
    on_ray = ragopt(*args, "--executor", "ray", "--address", cluster.address, workspace=root / "ws-ray")
    local = ragopt(*args, workspace=root / "ws-local")
    again = ragopt(*args, "--executor", "ray", "--address", cluster.address, workspace=root / "ws-ray")
    return {"root": root, "ray": on_ray, "local": local, "again": again}


def _index(done: Any, workspace: Path) -> Any:
    assert done.returncode == 0, done.stderr
    index_id = re.search(r"^index (\w+) at ", done.stdout, re.M).group(1)
    return open_index(workspace / "indexes" / index_id)


def _vectors(index: Any) -> np.ndarray:
    """The index's vectors in chunk order (the exact store keeps them grouped by owner)."""
    folder = index.path / "vectors"
    stored, positions = np.load(folder / "vectors.npy"), np.load(folder / "positions.npy")
    by_chunk = np.empty_like(stored)
    by_chunk[positions] = stored
    return by_chunk


def test_a_ray_build_gives_the_local_index_its_vectors_and_its_search_results(built: dict[str, Any]) -> None:
    root = built["root"]
    on_ray, local = _index(built["ray"], root / "ws-ray"), _index(built["local"], root / "ws-local")
    assert on_ray.manifest.id == local.manifest.id and on_ray.manifest.n_chunks == local.manifest.n_chunks > 128
    assert [c.id for c in on_ray.chunks] == [c.id for c in local.chunks]
    assert np.abs(_vectors(on_ray) - _vectors(local)).max() <= 1e-5
    questions = [json.loads(line)["question"] for line in (REPO / "evalsets" / "hospital" / "questions.jsonl").open(encoding="utf-8")][:20]
    queries = Embedder(EmbedderConfig()).encode(questions, role="query").vectors
    for question, vector in zip(questions, queries):
        found_ray, found_local = on_ray.store.search(vector, 10, None), local.store.search(vector, 10, None)
        assert [i for i, _ in found_ray] == [i for i, _ in found_local], question
        assert np.allclose([s for _, s in found_ray], [s for _, s in found_local], atol=1e-5), question


def test_the_texts_are_embedded_on_both_nodes_and_cached_by_the_driver(built: dict[str, Any]) -> None:
    first, again = built["ray"].stderr, built["again"].stderr
    assert re.search(r"embedded \d+ texts \(embedded by \d+ Ray tasks on 2 nodes\), 0 from cache", first), first
    assert "reused existing index" in again and "embedded 0 texts" in again, again


def test_a_cluster_that_does_not_answer_is_one_line_before_any_work(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for address in ("127.0.0.1:1", "ray://127.0.0.1:1"):
        done = ragopt("index", "--dataset", str(REPO / "evalsets" / "hospital"), "--executor", "ray", "--address", address,
                      workspace=ws)
        line = one_line_error(done, "index")
        assert "[--address]" in line and f"no Ray cluster answers at {address}" in line, line
    assert not ws.exists()


def test_a_worker_whose_model_differs_from_the_drivers_refuses_the_piece() -> None:
    with pytest.raises(InputError, match="install the same model on every node") as caught:
        embed_piece(EmbedderConfig(), "a-model-of-another-node", ["a text"], "passage")
    assert "\n" not in str(caught.value)
