"""LangChain's own standard suite for retrievers (`langchain-tests`, RetrieversIntegrationTests) against
RagoptRetriever over hybrid retrieval of the tiny corpus: every test of the suite runs, none overridden or
marked as unsupported. Beside it, what the suite does not check: k below 1, or deeper than the pipeline
retrieves, is an error naming k, on the retriever and at invoke time."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from ragopt.config import RetrievalConfig
from ragopt.errors import InputError
from ragopt.interop.langchain import RagoptRetriever
from ragopt.plan import retrieval_stages

DEPTH = 5


class TestRagoptRetrieverStandard(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _stages(self, tiny_index: Any) -> None:
        index, embedder = tiny_index
        self.stages = retrieval_stages(index, embedder, RetrievalConfig(retriever="hybrid"), k=DEPTH)

    @property
    def retriever_constructor(self) -> type[RagoptRetriever]:
        return RagoptRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"pipeline": self.stages}

    @property
    def retriever_query_example(self) -> str:
        return "What causes ocean tides?"


def test_k_below_one_or_past_the_pipelines_depth_is_an_error_naming_k(tiny_index: Any) -> None:
    index, embedder = tiny_index
    stages = retrieval_stages(index, embedder, RetrievalConfig(retriever="hybrid"), k=DEPTH)
    retriever = RagoptRetriever(pipeline=stages)
    assert len(retriever.invoke("What causes ocean tides?", k=DEPTH)) == DEPTH
    for k in (0, -1, DEPTH + 1):
        with pytest.raises(InputError, match=r"^\[k\]: k") as exc:
            retriever.invoke("What causes ocean tides?", k=k)
        assert exc.value.field == "k"
    with pytest.raises(ValueError, match=f"deeper than the pipeline retrieves \\({DEPTH} hits\\)"):
        RagoptRetriever(pipeline=stages, k=DEPTH + 1)
    with pytest.raises(ValueError, match="at least 1"):
        RagoptRetriever(pipeline=stages, k=0)
