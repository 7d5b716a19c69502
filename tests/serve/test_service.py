"""The serving core without HTTP, on real llama.cpp (the tiny GGUF): a cancel stops generation within one
decode step; routing sends short questions to the small model; a failing primary falls back to the small
model, then to the extractive answer, marked degraded; admission refuses beyond the slots."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from fixtures.serving import serve_options, served_plan
from ragopt.pipeline import RequestState, Step
from ragopt.stages.generate_extractive import ExtractiveGenerator
from ragopt.serve.build import ServeOptions, build_service
from ragopt.cache import DiskStore
from ragopt.serve.caches import ServeCaches
from ragopt.serve.service import AskOptions, Backend, Principal, RagService, RequestHandle, ServeSettings

ACME = Principal(key_id="k1", tenant="acme", scopes=("staff",))


def _service(stack: ExitStack, tiny_gguf: Path, dataset: Path, ws: Path, **kw: Any) -> RagService:
    settings = ServeSettings(**kw.pop("settings", {}))
    plan = served_plan(model=str(tiny_gguf), n_ctx=4096, max_tokens=kw.pop("max_tokens", 400), **kw.pop("generate", {}))
    opts = ServeOptions(settings=settings, plan=plan, dataset=str(dataset), **kw)
    return build_service(opts, ws, stack)


def test_cancel_stops_generation_within_one_decode_step(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    with ExitStack() as stack:
        service = _service(stack, tiny_gguf, serve_files["dataset"], tmp_path)
        handle = RequestHandle()
        pieces: list[str] = []

        def on_token(piece: str) -> None:
            pieces.append(piece)
            if len(pieces) == 5:
                handle.cancel()

        out = service.answer("Tell me about volcanoes", ACME, AskOptions(realtime=True), handle, on_token)
        trace = out["trace"]
        assert trace["cancelled"] and trace["finish_reason"] == "deadline"
        assert len(pieces) == 5 and trace["tokens_out"] <= 6  # the token being decoded at the cancel, at most
        assert not trace["timed_out"]  # a cancel is not a timeout


class Broken:
    """A generator that fails on purpose (fault injection)."""

    name, reads, writes = "generate", ("query", "hits"), ("answer",)

    def run(self, state: RequestState) -> RequestState:
        raise ConnectionError("primary backend down")


def _with_backends(service: RagService, backends: dict[str, Backend], ws: Path) -> RagService:
    """A service over the same retrieval with other generation backends (to inject a failing one)."""
    caches = ServeCaches(DiskStore(ws / "other-cache"))
    return RagService([s.stage for s in service.retrieve.steps], backends,
                      ExtractiveGenerator(), service.settings, caches, service.kb_version, service.retrieval_id)


def test_routing_and_the_fallback_chain(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    with ExitStack() as stack:
        service = _service(stack, tiny_gguf, serve_files["dataset"], tmp_path, small_model=str(tiny_gguf), max_tokens=8,
                           settings={"small_max_words": 5})
        short = service.answer("What causes tides?", ACME, AskOptions(realtime=True), RequestHandle())
        long = service.answer("Why does bread dough rise in a warm oven?", ACME, AskOptions(realtime=True), RequestHandle())
        assert short["trace"]["route"] == "small" and long["trace"]["route"] == "default"
        assert short["trace"]["degraded"] == [] and short["trace"]["generator"].startswith("llama:")

        default, small = service.backends["default"], service.backends["small"]
        broken = Backend("default", [Broken()], default.model_id, default.prompt_version)
        # the primary fails: the small model answers, marked degraded
        out = _with_backends(service, {"default": broken, "small": small}, tmp_path).answer(
            "Why does bread dough rise in a warm oven?", ACME, AskOptions(), RequestHandle())
        assert out["trace"]["generator"].startswith("llama:") and "ConnectionError" in out["trace"]["degraded"][0]
        span = next(s for s in out["trace"]["spans"] if s["name"] == "generate.fallback")
        assert span["usage"]["attrs"]["fallback_used"] == "generate.small"

        # both fail: the extractive answer, and a degraded answer is never cached
        both = _with_backends(service, {"default": broken, "small": Backend("small", [Broken()], "s", "p")}, tmp_path)
        for _ in range(2):
            out = both.answer("Why does bread dough rise in a warm oven?", ACME, AskOptions(), RequestHandle())
            assert out["trace"]["generator"] == "extractive" and out["trace"]["degraded"]
            assert out["trace"]["cache"]["answer"] is False


def test_personal_requests_bypass_the_caches(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    with ExitStack() as stack:
        service = _service(stack, tiny_gguf, serve_files["dataset"], tmp_path, max_tokens=8)
        for _ in range(2):
            out = service.answer("What causes tides?", ACME, AskOptions(personal=True), RequestHandle())
            assert out["trace"]["cache"] == {"answer": None, "retrieval": None}
        assert service.caches.answers.cache_hits == service.caches.retrieval.cache_hits == 0


@pytest.mark.parametrize("flag", ["model", "dataset"])
def test_missing_files_are_input_errors_before_any_work(flag: str, tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    from ragopt.errors import InputError

    kw = {"model": str(tiny_gguf), "dataset": str(serve_files["dataset"]), flag: str(tmp_path / "missing")}
    with ExitStack() as stack, pytest.raises(InputError, match=f"--{flag}"):
        build_service(serve_options(["--model", kw["model"], "--dataset", kw["dataset"]]), tmp_path, stack)


class BrokenReranker:
    """A reranker that fails on purpose."""

    name, reads, writes = "rerank", ("query", "hits"), ("hits",)

    def __init__(self) -> None:
        self.calls = 0

    def run(self, state: RequestState) -> RequestState:
        self.calls += 1
        raise TimeoutError("reranker overloaded")


def test_a_failing_reranker_is_skipped_behind_its_breaker(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    with ExitStack() as stack:
        service = _service(stack, tiny_gguf, serve_files["dataset"], tmp_path, max_tokens=4,
                           settings={"breaker_failures": 2, "breaker_reset_s": 60})
        reranker = BrokenReranker()
        # as steps_by_slot(skippable=True) hands serve a stage whose spec says a request survives it (rerank's)
        retrieval = [s.stage for s in service.retrieve.steps] + [Step(reranker, required=False)]
        guarded = RagService(retrieval, service.backends, ExtractiveGenerator(), service.settings,
                             ServeCaches(DiskStore(tmp_path / "c2")), service.kb_version, service.retrieval_id)
        for _ in range(3):
            out = guarded.answer("What causes tides?", ACME, AskOptions(realtime=True), RequestHandle())
            assert out["answer"] and any(d.startswith("rerank:") for d in out["trace"]["degraded"])
        assert reranker.calls == 2 and guarded.breakers["rerank"].state == "open"  # the third never reached it


def test_a_plan_that_routes_is_served_as_measured_short_questions_extractively(tiny_gguf: Path, serve_files: dict[str, Path],
                                                                               tmp_path: Path) -> None:
    from ragopt.errors import InputError

    with ExitStack() as stack:  # a sweep's routed trial: the LLM, and the extractive answer for short questions
        service = _service(stack, tiny_gguf, serve_files["dataset"], tmp_path, max_tokens=8,
                           generate={"route_small_max_words": 5})
        assert service.router.small_max_words == 5 and service.backends["small"].model_id.startswith("extractive:")
        short = service.answer("What causes tides?", ACME, AskOptions(realtime=True), RequestHandle())
        long = service.answer("Why does bread dough rise in a warm oven?", ACME, AskOptions(realtime=True), RequestHandle())
        assert short["trace"]["route"] == "small" and short["trace"]["generator"].startswith("extractive")
        assert long["trace"]["route"] == "default" and long["trace"]["generator"].startswith("llama:")
        with pytest.raises(InputError) as refused:  # a second model has no route left to take
            _service(stack, tiny_gguf, serve_files["dataset"], tmp_path / "other", small_model=str(tiny_gguf),
                     generate={"route_small_max_words": 5})
        assert refused.value.field == "--small-model" and "route_small_max_words" in refused.value.message
        assert not (tmp_path / "other").exists()  # refused before an index was built
