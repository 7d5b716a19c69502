"""OpenAI's request shape through `ragopt serve`: content-part arrays, earlier turns as the question's history,
max_tokens / temperature / stop / seed within the plan's settings, and a 400 naming each field ragopt cannot
honour; then the openai SDK itself against a real uvicorn with llama.cpp (the tiny GGUF): an answer of at most
max_tokens tokens with a usage chunk, `n=2` refused naming `n`, `/v1/models`; a conversation's turns in the
trace and in the cache key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from fixtures.serving import running_service, served_plan

from ragopt.serve.build import ServeOptions
from ragopt.serve.openai_shape import BadRequest, ChatBody, chat_request
from ragopt.serve.service import ServeSettings
from ragopt.stages.generate_llama import GeneratorConfig
from ragopt.types import Sampling, Turn

BETA = {"Authorization": "Bearer key-beta"}


def _request(**body: Any) -> Any:
    return chat_request(ChatBody.model_validate(body))


def test_text_parts_are_joined_earlier_turns_become_the_history_and_system_messages_the_instructions() -> None:
    got = _request(messages=[
        {"role": "system", "content": "Answer in English."},
        {"role": "user", "content": [{"type": "text", "text": "Which team owns"}, {"type": "text", "text": "lab_sync?"}]},
        {"role": "developer", "content": "Be brief."},
        {"role": "assistant", "content": "Clinical Data Engineering [1]."},
        {"role": "user", "content": [{"type": "text", "text": "Who manages that team?"}]},
    ])
    assert got.question == "Who manages that team?" and got.sampling is None and not got.include_usage
    assert got.history == [Turn(role="user", content="Which team owns\nlab_sync?"),
                           Turn(role="assistant", content="Clinical Data Engineering [1].")]
    assert got.instructions == "Answer in English.\n\nBe brief."


@pytest.mark.parametrize(("body", "field"), [
    ({"n": 2}, "n"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"logprobs": True}, "logprobs"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages.0.content.0"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}, "messages.1.role"),
    ({"messages": [{"role": "tool", "content": "42"}, {"role": "user", "content": "and?"}]}, "messages.0.role"),
])
def test_what_ragopt_cannot_honour_is_refused_naming_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(BadRequest) as exc:
        _request(**{"messages": [{"role": "user", "content": "Who?"}], **body})
    assert exc.value.field == field and str(exc.value).startswith(f"{field}: ")


def test_harmless_defaults_pass_and_sampling_stays_within_the_plan() -> None:
    got = _request(messages=[{"role": "user", "content": "Who?"}], n=1, tools=[], tool_choice="none", logprobs=False,
                   response_format={"type": "text"}, max_tokens=500, max_completion_tokens=8, temperature=0.7,
                   stop="END", seed=3, stream_options={"include_usage": True})
    assert got.sampling == Sampling(max_tokens=8, temperature=0.7, stop=("END",), seed=3) and got.include_usage
    plan = GeneratorConfig(max_tokens=64, stop=("\n\n",))
    assert plan.for_request(got.sampling).max_tokens == 8
    assert plan.for_request(Sampling(max_tokens=4000)).max_tokens == 64  # never past the plan's budget
    mine = plan.for_request(got.sampling)
    assert (mine.temperature, mine.seed, mine.stop) == (0.7, 3, ("\n\n", "END"))
    assert plan.for_request(None) is plan


@pytest.fixture(scope="module")
def served(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    plan = served_plan(model=str(tiny_gguf), n_ctx=4096, max_tokens=24, repeat_stop=0)
    plan = plan.model_copy(update={"stages": {**plan.stages, "history": {"keep_turns": 2, "summary_tokens": 16}}})
    opts = ServeOptions(settings=ServeSettings(), plan=plan, dataset=str(serve_files["dataset"]))
    with running_service(opts, tmp_path_factory.mktemp("ws"), serve_files["keys"]) as running:
        yield running


def test_the_openai_sdk_gets_at_most_max_tokens_a_usage_chunk_and_a_400_for_n(served: tuple[str, Any]) -> None:
    import openai

    url, _ = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="key-beta", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["ragopt"]
    messages = [{"role": "user", "content": [{"type": "text", "text": "Who lays the eggs"}, {"type": "text", "text": "in a hive?"}]}]
    full = client.chat.completions.create(model="ragopt", messages=messages, temperature=0)
    assert full.usage.completion_tokens > 8  # the plan's own budget (24) lets this answer run past 8
    chunks = list(client.chat.completions.create(model="ragopt", messages=messages, max_tokens=8, stream=True,
                                                 stream_options={"include_usage": True}))
    usage = [c for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].choices == [] and chunks[-1] is usage[0]
    assert 1 <= usage[0].usage.completion_tokens <= 8
    assert any(c.choices and c.choices[0].finish_reason == "length" for c in chunks)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="ragopt", messages=messages, n=2)
    assert exc.value.status_code == 400 and exc.value.param == "n" and exc.value.code == "unsupported_value"
    assert exc.value.type == "invalid_request_error" and exc.value.body["message"].startswith("n: ")


def test_every_v1_error_is_in_openai_shape_for_the_sdk(served: tuple[str, Any]) -> None:
    """A body without messages, a value out of range, a bad key, an unknown /v1 route and a body that is not JSON:
    each is OpenAI's {"error": {"message", "type", "param", "code"}}, read by the SDK; other routes keep theirs."""
    import openai

    url, _ = served
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="key-beta", max_retries=0)
    with pytest.raises(openai.BadRequestError) as exc:
        client.post("/chat/completions", body={"model": "ragopt"}, cast_to=httpx.Response)
    assert (exc.value.param, exc.value.code, exc.value.type) == ("messages", "missing_required_parameter", "invalid_request_error")
    assert sorted(exc.value.response.json()["error"]) == ["code", "message", "param", "type"]
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="ragopt", messages=[{"role": "user", "content": "Who?"}], temperature=5)
    assert exc.value.param == "temperature" and exc.value.code == "invalid_value"
    with pytest.raises(openai.AuthenticationError) as auth:
        openai.OpenAI(base_url=f"{url}/v1", api_key="nope", max_retries=0).models.list()
    assert (auth.value.type, auth.value.code, auth.value.param) == ("authentication_error", "invalid_api_key", None)
    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model="ragopt", input="bees")
    assert missing.value.code == "unknown_url"
    broken = httpx.post(f"{url}/v1/chat/completions", content=b"{\"messages\": [", timeout=30,
                        headers={**BETA, "Content-Type": "application/json"})
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"
    assert broken.json()["error"]["param"] is None
    assert httpx.get(f"{url}/nowhere", timeout=30).json() == {"error": "Not Found"}  # not /v1: its own shape


def test_a_conversation_reaches_the_history_stage_and_keys_the_cache(served: tuple[str, Any]) -> None:
    url, _ = served
    turns = [{"role": "user", "content": f"Tell me about bees, part {i}. Only public facts."} if i % 2 == 0 else
             {"role": "assistant", "content": f"Bees live in hives [{i}]."} for i in range(6)]
    body = {"model": "ragopt", "messages": [*turns, {"role": "user", "content": "Who lays the eggs?"}], "max_tokens": 4}
    first = httpx.post(f"{url}/v1/chat/completions", json=body, headers=BETA, timeout=60).json()
    history = first["ragopt"]["trace"]["history"]
    assert history["turns"] == 6 and history["summarized_turns"] == 4  # keep_turns 2: four older turns condensed
    again = httpx.post(f"{url}/v1/chat/completions", json=body, headers=BETA, timeout=60).json()
    assert again["ragopt"]["trace"]["cache"]["answer"] is True
    other = {**body, "messages": [*turns[:2], body["messages"][-1]]}  # the same question after another conversation
    answered = httpx.post(f"{url}/v1/chat/completions", json=other, headers=BETA, timeout=60).json()
    assert answered["ragopt"]["trace"]["cache"] == {"answer": False, "retrieval": False}
    alone = httpx.post(f"{url}/v1/ask", json={"question": "Who lays the eggs?", "history": turns}, headers=BETA, timeout=60)
    assert alone.json()["trace"]["history"]["turns"] == 6
    bad = httpx.post(f"{url}/v1/ask", json={"question": "Who?", "history": [{"role": "robot", "content": "x"}]},
                     headers=BETA, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["param"].startswith("history.0.role")
