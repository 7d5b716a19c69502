"""OpenAI's sampling fields through `ragopt serve`, sent by the openai SDK: `top_p`, the frequency and presence
penalties and `logit_bias` reach llama.cpp's sampler (the trace's `sampler` is what the chain was built with, and
the answers show llama.cpp applied it), they key the answer cache, and a generator that cannot honour one refuses it
by name: the extractive answer honours `max_tokens` and `stop` only, and a routed plan sends a question that asks
for sampling to its LLM rather than to the extractive answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from fixtures.serving import running_service, served_plan

from ragopt.serve.build import ServeOptions
from ragopt.serve.service import ServeSettings

openai = pytest.importorskip("openai")

QUESTION = "Which member of a bee colony lays the eggs in the hive?"  # longer than the routing limit: the LLM's


@pytest.fixture(scope="module")
def llama(tiny_gguf: Path, serve_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The tiny GGUF in process; questions of up to 4 words go to the extractive answer."""
    plan = served_plan(model=str(tiny_gguf), n_ctx=4096, max_tokens=24, repeat_stop=0, route_small_max_words=4)
    opts = ServeOptions(settings=ServeSettings(), plan=plan, dataset=str(serve_files["dataset"]))
    with running_service(opts, tmp_path_factory.mktemp("ws"), serve_files["keys"]) as (url, _):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="key-beta", max_retries=0)


@pytest.fixture(scope="module")
def extractive(serve_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    opts = ServeOptions(settings=ServeSettings(), plan=served_plan("extractive"), dataset=str(serve_files["dataset"]))
    with running_service(opts, tmp_path_factory.mktemp("ws"), serve_files["keys"]) as (url, _):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="key-beta", max_retries=0)


def _ask(client: Any, question: str = QUESTION, **sampling: Any) -> Any:
    return client.chat.completions.create(model="ragopt", messages=[{"role": "user", "content": question}], **sampling)


def _text(reply: Any) -> str:
    return reply.choices[0].message.content


def _trace(reply: Any) -> dict[str, Any]:
    return reply.model_extra["ragopt"]["trace"]


def _sampler(reply: Any) -> dict[str, Any]:
    generate = next(s for s in _trace(reply)["spans"] if s["name"] == "generate")
    return generate["usage"]["attrs"]["sampler"]


def test_top_p_reaches_llama_cpp_s_sampler(llama: Any) -> None:
    greedy = _ask(llama, temperature=0)
    assert _sampler(greedy) == {"greedy": True}
    half = _ask(llama, temperature=0.8, top_p=0.5, seed=7)
    got = _sampler(half)
    assert (got["greedy"], got["top_p"], got["temperature"], got["seed"]) == (False, 0.5, 0.8, 7)
    # and llama.cpp applies it: top_p 0 keeps only the likeliest token, so even at temperature 2 the answer is the
    # greedy one, where top_p 1 at temperature 2 draws another
    assert _text(_ask(llama, temperature=2, top_p=0, seed=7)) == _text(greedy)
    assert _text(_ask(llama, temperature=2, top_p=1, seed=7)) != _text(greedy)


def test_a_logit_bias_steers_every_token_and_the_penalties_reach_the_sampler(llama: Any, tiny_gguf: Path) -> None:
    from llama_cpp import Llama

    vocab = Llama(model_path=str(tiny_gguf), vocab_only=True, verbose=False)
    token = vocab.tokenize(b" hive", add_bos=False)[0]
    piece = vocab.detokenize([token]).decode()
    biased = _ask(llama, temperature=0, logit_bias={str(token): 100})
    assert _sampler(biased)["logit_bias"] == [[token, 100.0]]
    assert _text(biased) == (piece * biased.usage.completion_tokens).strip() and biased.usage.completion_tokens == 24
    greedy = _ask(llama, temperature=0)
    penalized = _ask(llama, temperature=0, frequency_penalty=1.0, presence_penalty=2.0)
    got = _sampler(penalized)
    assert (got["frequency_penalty"], got["presence_penalty"]) == (1.0, 2.0)
    assert _text(penalized) != _text(greedy)  # the greedy answer repeats itself; the penalties steer it away
    with pytest.raises(openai.BadRequestError) as exc:
        _ask(llama, logit_bias={"99999999": 5})
    assert exc.value.param == "logit_bias" and "vocabulary" in exc.value.message
    with pytest.raises(openai.BadRequestError) as exc:
        _ask(llama, logit_bias={str(token): 101})
    assert exc.value.param.startswith("logit_bias")


def test_sampling_fields_key_the_answer_cache(llama: Any) -> None:
    first = _ask(llama, temperature=0.9, top_p=0.9, seed=3)
    assert _trace(first)["cache"]["answer"] is False
    assert _trace(_ask(llama, temperature=0.9, top_p=0.9, seed=3))["cache"]["answer"] is True
    for other in ({"top_p": 0.8}, {"presence_penalty": 0.5}, {"frequency_penalty": 0.5}, {"logit_bias": {"5": 1}}):
        reply = _ask(llama, **{"temperature": 0.9, "top_p": 0.9, "seed": 3, **other})
        assert _trace(reply)["cache"]["answer"] is False, other


def test_a_routed_question_that_asks_for_sampling_goes_to_the_llm(llama: Any) -> None:
    assert _trace(_ask(llama, "Who lays eggs?"))["route"] == "small"
    assert _trace(_ask(llama, "Who lays eggs?", max_tokens=5))["route"] == "small"  # the extractive answer honours it
    assert _trace(_ask(llama, "Who lays eggs?", top_p=0.5, temperature=0.7))["route"] == "default"


def test_the_extractive_answer_honours_max_tokens_and_stop_and_refuses_sampling(extractive: Any) -> None:
    whole = _text(_ask(extractive))
    words = whole.split()
    assert len(words) > 4
    short = _ask(extractive, max_tokens=3)
    assert _text(short) == " ".join(words[:3]) and short.choices[0].finish_reason == "length"
    streamed = extractive.chat.completions.create(model="ragopt", messages=[{"role": "user", "content": QUESTION}],
                                                  max_tokens=3, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == _text(short)
    stopped = _ask(extractive, stop=[words[3]])
    assert _text(stopped) == whole[: whole.index(words[3])].rstrip() and stopped.choices[0].finish_reason == "stop"
    _ask(extractive, temperature=0, top_p=1, seed=4)  # a deterministic answer is what these ask for
    for field, value in (("temperature", 0.7), ("top_p", 0.5), ("frequency_penalty", 1.0), ("logit_bias", {"5": 1})):
        with pytest.raises(openai.BadRequestError) as exc:
            _ask(extractive, **{field: value})
        assert exc.value.param == field and exc.value.code == "unsupported_value"
