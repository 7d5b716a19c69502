"""The OpenAI-compatible HTTP generator against a scripted SSE server on a real uvicorn. The server is a fake
on purpose: it injects the faults (a stream cut mid-answer, an error status) and reports llama-server's
`timings` with known values. The real llama-server is exercised in tests/serve/test_llama_server.py."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse, StreamingResponse  # noqa: E402

from ragopt.pipeline import Pipeline, RequestState, Step  # noqa: E402
from ragopt.stages.generate_extractive import ExtractiveGenerator  # noqa: E402
from ragopt.errors import BackendError  # noqa: E402
from ragopt.stages.generate_http import HttpGenerator, HttpGeneratorConfig  # noqa: E402
from ragopt.types import Chunk, Hit, Query, Sampling  # noqa: E402

from fixtures.serving import uvicorn_server  # noqa: E402

TIMINGS = {"prompt_n": 7, "cache_n": 30, "prompt_ms": 12.5, "predicted_n": 5, "predicted_ms": 20.0}


def _chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> str:
    delta = {"content": content} if content is not None else {}
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}) + "\n\n"


def scripted_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        mode = body["messages"][-1]["content"].rsplit("Question: ", 1)[-1]
        words = ["Tides", " come", " from", " the", " moon [1]."]

        async def stream() -> Iterator[str]:
            pieces = [f" w{i}" for i in range(2000)] if mode == "endless" else words
            for i, w in enumerate(pieces):
                if mode == "crash" and i == 2:
                    raise RuntimeError("injected crash mid-stream")
                yield _chunk(w)
            yield _chunk(finish="stop", timings=TIMINGS)
            yield "data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 37, "completion_tokens": 5}}) + "\n\n"
            yield "data: [DONE]\n\n"

        if mode == "overloaded":
            return JSONResponse({"error": "busy"}, status_code=503)
        if mode == "echo":  # the sampling fields as the server received them, as the answer
            got = {k: body.get(k) for k in ("temperature", "seed", "top_p", "frequency_penalty", "presence_penalty", "logit_bias")}
            words = [json.dumps(got, sort_keys=True)]
        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with uvicorn_server(scripted_app()) as url:
        yield url


class FixedHits:
    name, reads, writes = "hits", ("query",), ("hits",)

    def run(self, state: RequestState) -> RequestState:
        chunk = Chunk(id="c1", doc_id="d6", start=0, end=10, text="Ocean tides are caused by the moon.", title="Tides")
        state.hits = [Hit(chunk=chunk, score=1.0, rank=1, retriever="fixed")]
        return state


def _pipeline(url: str, fallback: bool = False) -> Pipeline:
    gen = HttpGenerator(HttpGeneratorConfig(base_url=url, max_tokens=64))
    step: Any = Step(gen, fallback=ExtractiveGenerator()) if fallback else gen
    return Pipeline([FixedHits(), gen.prompt_stage(), step])


def test_streams_tokens_and_reports_server_timings(server_url: str) -> None:
    pieces: list[str] = []
    result = _pipeline(server_url).run("normal", on_token=pieces.append)
    assert pieces == ["Tides", " come", " from", " the", " moon [1]."]
    assert result.answer.text == "Tides come from the moon [1]." and result.answer.finish_reason == "stop"
    assert [c.doc_id for c in result.answer.citations] == ["d6"]
    span = result.trace.span("generate")
    a = span.usage.attrs
    assert (span.usage.tokens_in, span.usage.tokens_out) == (37, 5)
    assert (a["prefill_ms"], a["reused_tokens"], a["prompt_tokens_evaluated"]) == (12.5, 30, 7)
    assert a["reused_fraction"] == pytest.approx(30 / 37)
    assert a["ttft_ms"] > 0 and a["tpot_ms"] > 0 and a["queue_ms"] >= 0


def test_the_prompt_stage_fits_with_an_estimate_when_the_server_cannot_tokenize(server_url: str) -> None:
    gen = HttpGenerator(HttpGeneratorConfig(base_url=server_url, n_ctx=300, max_tokens=100))
    state = RequestState(query=Query(text="normal " + "word " * 400))
    state = FixedHits().run(state)
    state = gen.prompt_stage().run(state)
    assert gen.renderer().exact is False
    assert len(state.prompt.text) // 3 <= 200 and state.prompt.question_truncated


def test_a_stream_cut_mid_answer_fails_and_the_fallback_answers_degraded(server_url: str) -> None:
    with pytest.raises(BackendError):
        _pipeline(server_url).run("crash")
    result = _pipeline(server_url, fallback=True).run("crash")
    assert result.answer.generator == "extractive"
    assert "BackendError" in result.trace.degraded[0]


def test_an_error_status_is_a_backend_error(server_url: str) -> None:
    with pytest.raises(BackendError, match="503"):
        _pipeline(server_url).run("overloaded")


def test_a_passed_deadline_stops_reading_at_the_next_piece(server_url: str) -> None:
    state_box: dict[str, RequestState] = {}
    pieces: list[str] = []

    class Capture:
        name, reads, writes = "capture", ("query",), ("hits",)

        def run(self, state: RequestState) -> RequestState:
            state_box["s"] = state
            return FixedHits().run(state)

    def on_token(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 4:
            state_box["s"].deadline = 0.0  # what the service's cancel does

    gen = HttpGenerator(HttpGeneratorConfig(base_url=server_url, max_tokens=64))
    result = Pipeline([Capture(), gen.prompt_stage(), gen]).run("endless", on_token=on_token)
    assert len(pieces) == 4
    assert result.answer.finish_reason == "deadline" and result.answer.incomplete


def test_the_request_s_sampling_fields_reach_the_server_as_openai_names_them(server_url: str) -> None:
    gen = HttpGenerator(HttpGeneratorConfig(base_url=server_url, max_tokens=64, temperature=0.2))
    sampling = Sampling(temperature=0.7, seed=5, top_p=0.5, frequency_penalty=1.5, presence_penalty=-0.5,
                        logit_bias=((15043, -100.0), (7, 2.5)))
    state = FixedHits().run(RequestState(query=Query(text="echo"), sampling=sampling))
    state = gen.run(gen.prompt_stage().run(state))
    assert json.loads(state.answer.text) == {"temperature": 0.7, "seed": 5, "top_p": 0.5, "frequency_penalty": 1.5,
                                             "presence_penalty": -0.5, "logit_bias": {"7": 2.5, "15043": -100.0}}
    plain = gen.run(gen.prompt_stage().run(FixedHits().run(RequestState(query=Query(text="echo")))))
    assert json.loads(plain.answer.text) == {"temperature": 0.2, "seed": 0, "top_p": None, "frequency_penalty": None,
                                             "presence_penalty": None, "logit_bias": None}  # the server's own defaults
