"""The real llama-server (built by scripts/build_llama_server.sh) as a child process with the tiny GGUF: the HTTP
generator's trace from its timings, a crash mid-stream answered by the extractive fallback, and the circuit
breaker opening while the server is dead and closing once it is back. Skips where the binary is not built
(outside CI); with $CI set a missing binary fails."""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from fixtures.serving import served_plan
from ragopt.pipeline import Pipeline
from ragopt.serve.build import ServeOptions, build_service
from ragopt.backends.llama_server import LlamaServer, find_binary
from ragopt.serve.service import AskOptions, Principal, RequestHandle, ServeSettings
from ragopt.stages.generate_http import HttpGenerator, HttpGeneratorConfig

ACME = Principal(key_id="k", tenant="acme", scopes=())

if find_binary() is None:
    if os.environ.get("CI"):
        raise RuntimeError("llama-server is required in CI: run scripts/build_llama_server.sh")
    pytest.skip("llama-server not built (scripts/build_llama_server.sh)", allow_module_level=True)


def test_http_generator_reports_the_servers_timings_and_prompt_reuse(tiny_gguf: Path) -> None:
    with LlamaServer(tiny_gguf, parallel=2, ctx_per_slot=1024) as server:
        gen = HttpGenerator(HttpGeneratorConfig(base_url=server.base_url, n_ctx=1024, max_tokens=8))
        pipe = Pipeline([gen.prompt_stage(), gen], inputs=("query", "hits"))
        first = pipe.run("What causes ocean tides?")
        again = pipe.run("What causes ocean tides and waves?")
        assert gen.renderer().exact  # the server's own template and tokenizer fitted the prompt
        a, b = first.trace.span("generate").usage.attrs, again.trace.span("generate").usage.attrs
        assert a["prefill_ms"] > 0 and a["prompt_tokens_evaluated"] > 0 and first.answer.text
        assert b["reused_tokens"] > 0  # the shared system prompt came from the slot's cache
        assert b["prompt_tokens_evaluated"] + b["reused_tokens"] == again.trace.span("generate").usage.tokens_in


def test_crash_mid_stream_then_breaker_opens_and_closes_when_the_server_is_back(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    settings = ServeSettings(breaker_failures=2, breaker_reset_s=1.0)
    plan = served_plan("llama-server", model=str(tiny_gguf), server_slots=2, n_ctx=1024, max_tokens=200)
    opts = ServeOptions(settings=settings, plan=plan, dataset=str(serve_files["dataset"]))
    with ExitStack() as stack:
        service = build_service(opts, tmp_path, stack)
        server = service.servers["default"]
        breaker = service.breakers["default"]
        ok = service.answer("What causes tides?", ACME, AskOptions(realtime=True), RequestHandle())
        assert ok["trace"]["generator"].startswith("http:") and not ok["trace"]["degraded"]

        pieces: list[str] = []

        def kill_at_third_token(piece: str) -> None:
            pieces.append(piece)
            if len(pieces) == 3:
                server.kill()  # the injected fault: the backend process dies mid-stream

        crashed = service.answer("What causes tides?", ACME, AskOptions(realtime=True), RequestHandle(), kill_at_third_token)
        assert crashed["trace"]["generator"] == "extractive" and "BackendError" in crashed["trace"]["degraded"][0]
        down = service.answer("How do glaciers form?", ACME, AskOptions(realtime=True), RequestHandle())
        assert down["trace"]["generator"] == "extractive" and breaker.state == "open"
        refused = service.answer("How do glaciers form?", ACME, AskOptions(realtime=True), RequestHandle())
        assert "BreakerOpen" in refused["trace"]["degraded"][0]

        server.start()  # the backend recovers (same port)
        time.sleep(settings.breaker_reset_s + 0.2)
        back = service.answer("How do glaciers form?", ACME, AskOptions(realtime=True), RequestHandle())
        assert back["trace"]["generator"].startswith("http:") and not back["trace"]["degraded"]
        assert breaker.state == "closed"
        assert breaker.transitions == ["closed->open", "open->half_open", "half_open->closed"]


def test_sampling_fields_reach_llama_server(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path: Path) -> None:
    """top_p, the penalties and logit_bias travel in the HTTP generator's body and llama-server applies them: a +100
    bias makes every token the biased one, and top_p 0 keeps only the likeliest token, so even at temperature 2 the
    answer is the greedy one (each asked after a warm-up, so that every answer reuses the same cached prompt)."""
    from llama_cpp import Llama

    from ragopt.types import Sampling

    plan = served_plan("llama-server", model=str(tiny_gguf), server_slots=1, n_ctx=1024, max_tokens=16, repeat_stop=0)
    opts = ServeOptions(settings=ServeSettings(), plan=plan, dataset=str(serve_files["dataset"]), cache=False)
    vocab = Llama(model_path=str(tiny_gguf), vocab_only=True, verbose=False)
    token = vocab.tokenize(b" hive", add_bos=False)[0]
    piece = vocab.detokenize([token]).decode()
    with ExitStack() as stack:
        service = build_service(opts, tmp_path, stack)

        def ask(**sampling: object) -> dict:
            return service.answer("What causes tides?", ACME, AskOptions(sampling=Sampling(**sampling)), RequestHandle())

        ask(temperature=0)  # the warm-up
        greedy = ask(temperature=0)
        assert ask(temperature=2, top_p=0, seed=3)["answer"] == greedy["answer"]
        assert ask(temperature=2, top_p=1, seed=3)["answer"] != greedy["answer"]
        biased = ask(temperature=0, logit_bias=((token, 100.0),), presence_penalty=0.5)
        assert biased["trace"]["generator"].startswith("http:") and not biased["trace"]["degraded"]
        assert biased["answer"] == (piece * biased["trace"]["tokens_out"]).strip() and biased["trace"]["tokens_out"] == 16
