"""The llama.cpp generator on a tiny random-weight GGUF: the real llama.cpp code path, no mocks.

The tiny model's text is noise, but its timings, streaming, KV reuse, deadlines, token budget, admission
and grammar-constrained decoding are those of llama.cpp itself. Generators share one `Resources` per
module (one loaded model per context setting), closed at the end.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

from fixtures.tiny_gguf import KV_BYTES_PER_TOKEN_F16

from ragopt.capacity import AdmissionError
from ragopt.pipeline import Pipeline, RequestState, Step, WiringError
from ragopt.resources import Resources
from ragopt.stages import generate_llama as gl
from ragopt.stages.citations import marker_numbers
from ragopt.stages.generate_extractive import ExtractiveGenerator
from ragopt.stages.prompt import BuildPrompt, FittedPrompt, PromptConfig
from ragopt.trace import summarize
from ragopt.types import Chunk, Hit, Query, Turn

TEXTS = [
    ("Paris", "Paris is the capital of France. It lies on the river Seine."),
    ("Berlin", "Berlin is the capital of Germany. It lies on the Spree."),
    ("Rome", "Rome is the capital city of Italy. It was born on seven hills."),
]


def make_hits(texts=TEXTS, prefix: str = "c") -> list[Hit]:
    return [
        Hit(chunk=Chunk(id=f"{prefix}{i}", doc_id=f"d{i}", start=0, end=len(t), text=t, title=title), score=1 / (i + 1), rank=i + 1, retriever="t")
        for i, (title, t) in enumerate(texts)
    ]


class FixedHits:
    name = "retrieve"
    reads: tuple[str, ...] = ()
    writes = ("hits",)

    def __init__(self, hits: list[Hit]):
        self.hits = hits

    def run(self, state: RequestState) -> RequestState:
        state.hits = list(self.hits)
        return state


class Sleep:
    """A stage that takes `seconds` before generation (a slow retriever)."""

    name = "slow"
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def __init__(self, seconds: float):
        self.seconds = seconds

    def run(self, state: RequestState) -> RequestState:
        time.sleep(self.seconds)
        return state


SHARED = Resources()


@pytest.fixture(autouse=True, scope="module")
def _close_models():
    yield
    SHARED.close()


def generator(model: Path, resources: Resources | None = SHARED, **kw) -> gl.LlamaGenerator:
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("max_tokens", 24)
    return gl.LlamaGenerator(gl.GeneratorConfig(model=str(model), **kw), resources)


def pipeline(gen: gl.LlamaGenerator, hits: list[Hit] | None = None, *before) -> Pipeline:
    return Pipeline([FixedHits(make_hits() if hits is None else hits), *before, gen.prompt_stage(), gen])


def ask(gen: gl.LlamaGenerator, query: Query | str, hits: list[Hit] | None = None, **kw) -> RequestState:
    """One request through the prompt stage and the generator called directly (no Pipeline)."""
    query = Query(text=query) if isinstance(query, str) else query
    state = RequestState(query=query, hits=make_hits() if hits is None else hits, **kw)
    return gen.run(gen.prompt_stage().run(state))


def test_trace_has_ttft_tpot_tokens_and_prompt(tiny_gguf):
    result = pipeline(generator(tiny_gguf)).run("What is the capital of France?")
    prompt, span = result.trace.span("prompt"), result.trace.span("generate")
    p, a = prompt.usage.attrs, span.usage.attrs
    assert a["ttft_ms"] > 0 and a["tpot_ms"] > 0 and a["tokens_per_s"] > 0 and a["prefill_ms"] > 0
    # TTFT is wall-clock from the request's arrival: it contains the prompt stage, the queue and the prefill
    assert a["ttft_ms"] >= prompt.ms + a["queue_ms"] + a["prefill_ms"]
    assert a["ttft_ms"] <= result.trace.total_ms
    assert a["decode_tokens"] == 24 == span.usage.tokens_out
    assert a["tpot_ms"] == pytest.approx(a["decode_ms"] / 23) and a["tokens_per_s"] == pytest.approx(1000 / a["tpot_ms"])
    assert p["prompt_tokens"] == span.usage.tokens_in > 100
    assert a["prompt_tokens_evaluated"] + a["reused_tokens"] == p["prompt_tokens"]
    assert a["queue_ms"] >= 0 and a["finish_reason"] == "length" and a["incomplete"] is False
    assert result.answer.finish_reason == "length" and result.answer.text
    fitted = result.state.prompt
    assert isinstance(fitted, FittedPrompt) and p["passages"] == ["c0", "c1", "c2"]
    assert "[1] Paris" in fitted.text and fitted.text.endswith("<|im_start|>assistant\n")
    summary = summarize([result.trace])
    assert summary["ttft_ms"]["n"] == 1 and summary["tpot_ms"]["n"] == 1 and summary["prefill_ms"]["n"] == 1


def test_ttft_counts_from_arrival_not_from_the_generator(tiny_gguf):
    gen = generator(tiny_gguf, max_tokens=4)
    result = pipeline(gen, None, Sleep(0.2)).run("What is the capital of France?")
    a = result.trace.span("generate").usage.attrs
    assert a["ttft_ms"] >= 200 > result.trace.span("generate").ms  # the slow stage before it is part of TTFT


def test_a_generator_without_its_prompt_stage_is_a_wiring_error(tiny_gguf):
    gen = generator(tiny_gguf)
    with pytest.raises(WiringError, match="'generate' reads 'prompt'"):
        Pipeline([FixedHits(make_hits()), gen])
    stage = gen.prompt_stage()
    assert isinstance(stage, BuildPrompt) and stage.budget_tokens == 1024 - 24 and stage.config == gen.config.prompt


def test_streaming_first_token_arrives_before_generation_ends(tiny_gguf):
    arrivals: list[tuple[float, str]] = []

    def on_token(piece: str) -> None:  # a fast client: it adds no time of its own
        arrivals.append((time.perf_counter(), piece))

    gen = generator(tiny_gguf, max_tokens=300)
    result = pipeline(gen).run("What is the capital of Italy?", on_token=on_token)
    t_end = time.perf_counter()
    decode_s = result.trace.span("generate").usage.attrs["decode_ms"] / 1000
    assert len(arrivals) >= 100
    # A generator that buffered its answer would deliver everything at the end; streaming delivers the first
    # piece while most of the decoding is still to come.
    assert t_end - arrivals[0][0] > 0.5 * decode_s > 0
    assert "".join(p for _, p in arrivals).strip() == result.answer.text


def test_consecutive_requests_reuse_the_stable_prefix(tiny_gguf):
    gen = generator(tiny_gguf)
    gen.engine.truncate(0)
    pipeline(gen, make_hits(prefix="a")).run("What is the capital of France?")
    second = pipeline(gen, make_hits(TEXTS[::-1], prefix="b")).run("Which river runs through Berlin?").trace
    stable = second.span("prompt").usage.attrs["stable_prefix_tokens"]
    a = second.span("generate").usage.attrs
    assert a["reused_tokens"] >= stable > 50
    # the prefix arithmetic agrees with llama.cpp's own count of prompt tokens evaluated
    assert a["prompt_tokens_evaluated"] == a["prefill_tokens"] > 0
    assert a["prompt_tokens_evaluated"] < second.span("prompt").usage.attrs["prompt_tokens"]
    assert 0 < a["reused_fraction"] < 1


def test_deadline_gives_partial_incomplete_answer_then_next_request_is_normal(tiny_gguf):
    gen = generator(tiny_gguf, n_ctx=2048, max_tokens=1500)
    pipe = pipeline(gen)
    pieces: list[str] = []

    def slow_client(piece: str) -> None:
        pieces.append(piece)
        time.sleep(0.002)

    late = pipe.run("What is the capital of France?", deadline_s=0.25, on_token=slow_client)
    assert late.answer.incomplete and late.answer.finish_reason == "deadline"
    assert late.answer.text and "".join(pieces).strip() == late.answer.text
    attrs = late.trace.span("generate").usage.attrs
    assert 0 < attrs["decode_tokens"] < 1500 and attrs["incomplete"] is True
    assert attrs["ttft_ms"] > 0 and attrs["tpot_ms"] > 0
    # A partial answer is not a failure (no fallback ran), but it is visible in the trace.
    assert late.trace.degraded == ["generate: answer incomplete (deadline)"]

    gen_short = generator(tiny_gguf, n_ctx=2048, max_tokens=20)
    normal = pipeline(gen_short).run("What is the capital of Germany?", deadline_s=30)
    assert not normal.answer.incomplete and normal.answer.finish_reason == "length"
    assert normal.trace.span("generate").usage.attrs["decode_tokens"] == 20
    assert normal.trace.degraded == []


def test_prompt_longer_than_context_is_fitted_never_a_crash(tiny_gguf):
    long_texts = [(f"Doc {i}", " ".join(["the capital city of the country is old"] * 12)) for i in range(30)]
    history = [Turn(role="user" if i % 2 == 0 else "assistant", content="tell me about the river and the king " * 10) for i in range(6)]
    gen = generator(tiny_gguf, n_ctx=512, max_tokens=32, prompt=PromptConfig(max_passages=30))
    result = pipeline(gen, make_hits(long_texts)).run(Query(text="What is the capital?", history=history))
    attrs = result.trace.span("prompt").usage.attrs
    assert attrs["prompt_tokens"] <= 512 - 32
    assert attrs["dropped_passages"] and attrs["dropped_passages"][-1] == "c29"
    assert result.answer.text and result.answer.finish_reason == "length"

    # even a question alone longer than the window is cut to fit
    giant = Query(text="what is the capital of france " * 400)
    result = pipeline(gen).run(giant)
    attrs = result.trace.span("prompt").usage.attrs
    assert attrs["question_truncated"] and attrs["prompt_tokens"] <= 480
    assert result.answer.text


def test_stop_strings_end_the_answer_before_them(tiny_gguf):
    # stop strings come from the model's own greedy output, so this runs the stop filter for real
    gen = generator(tiny_gguf, max_tokens=40)
    full = pipeline(gen).run("What is the capital of France?").answer.text
    stop = full[12:16]
    stopped = pipeline(generator(tiny_gguf, max_tokens=40, stop=(stop,))).run("What is the capital of France?")
    assert stopped.answer.finish_reason == "stop" and stop not in stopped.answer.text
    assert full.startswith(stopped.answer.text)


def test_a_failing_stream_consumer_leaves_the_model_usable(tiny_gguf):
    gen = generator(tiny_gguf)

    def disconnect(piece: str) -> None:
        raise ConnectionError("client went away")

    with pytest.raises(ConnectionError):
        ask(gen, "What is the capital of France?", on_token=disconnect)
    assert gen.engine.lock.waiting == 0 and gen.engine.lock.acquire(timeout=0)  # the lock was released
    gen.engine.lock.release()
    state = ask(gen, "What is the capital of France?")
    assert state.answer.finish_reason == "length" and state.usage.attrs["reused_tokens"] == 0


def test_sampling_with_a_seed_is_reproducible(tiny_gguf):
    gen = generator(tiny_gguf, temperature=0.9, seed=7, max_tokens=20)
    pipe = pipeline(gen)
    a = pipe.run("What is the capital of France?").answer.text
    pipe.run("Something else entirely, to change the KV state")
    b = pipe.run("What is the capital of France?").answer.text
    assert a == b


def test_admission_refuses_over_budget_and_pipeline_falls_back(tiny_gguf):
    budget = 200 * KV_BYTES_PER_TOKEN_F16  # room for 200 tokens of KV: less than prompt + max_tokens
    gen = generator(tiny_gguf, kv_budget_bytes=budget)
    with pytest.raises(AdmissionError, match="over the KV budget"):
        pipeline(gen).run("What is the capital of France?")
    result = Pipeline([FixedHits(make_hits()), gen.prompt_stage(), Step(gen, fallback=ExtractiveGenerator())]).run("What is the capital of France?")
    assert result.answer.generator == "extractive" and result.answer.citations
    assert result.trace.degraded[0].startswith("generate: AdmissionError:")
    assert ask(generator(tiny_gguf, kv_budget_bytes=4096 * KV_BYTES_PER_TOKEN_F16), "q").answer.text


def test_one_model_per_resources_and_context_settings(tiny_gguf):
    gen = generator(tiny_gguf, max_tokens=25)
    assert gen.engine is generator(tiny_gguf, max_tokens=5).engine  # same Resources, same context settings
    assert gen.engine is not generator(tiny_gguf, n_ctx=768).engine  # another context: another Llama
    private = generator(tiny_gguf, resources=None)
    engine = private.engine
    assert engine is not gen.engine and engine is private.engine  # a private Resources holds its own
    private.close()
    assert engine.llm._ctx is None or getattr(engine.llm._ctx, "ctx", None) is None  # freed by close()


def test_one_model_shared_by_concurrent_requests_with_measured_queue(tiny_gguf):
    gen = generator(tiny_gguf, max_tokens=25)
    results: dict[str, RequestState] = {}

    def slow(piece: str) -> None:
        time.sleep(0.004)

    def call(name: str, delay: float) -> None:
        time.sleep(delay)
        results[name] = ask(gen, f"question {name}", on_token=slow)

    threads = [threading.Thread(target=call, args=("first", 0.0)), threading.Thread(target=call, args=("second", 0.02))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["first"].answer.text and results["second"].answer.text
    second = results["second"].usage.attrs
    assert second["queue_ms"] > 20  # waited for the first request's ~100 ms of decoding
    assert second["ttft_ms"] > second["queue_ms"]  # TTFT includes the wait
    assert results["first"].usage.attrs["queue_ms"] < 20


def test_queue_timeout_raises_so_the_fallback_answers(tiny_gguf):
    gen = generator(tiny_gguf)
    engine = gen.engine
    assert engine.lock.acquire()
    try:
        result = Pipeline([FixedHits(make_hits()), gen.prompt_stage(), Step(gen, fallback=ExtractiveGenerator())]).run(
            "capital of France?", deadline_s=0.1
        )
    finally:
        engine.lock.release()
    assert result.answer.generator == "extractive"
    assert "QueueTimeout" in result.trace.degraded[0]


def test_live_kv_is_not_reused_across_tenants_beyond_the_neutral_prefix(tiny_gguf):
    gen = generator(tiny_gguf)
    hits = make_hits()

    def ask_as(tenant: str) -> dict:
        return ask(gen, Query(text="What is the capital of France?", tenant=tenant), hits).usage.attrs

    ask_as("acme")
    same = ask_as("acme")
    other = ask_as("globex")
    assert same["reused_tokens"] > same["stable_prefix_tokens"]  # same tenant: passages reused too
    assert other["reused_tokens"] <= other["stable_prefix_tokens"]  # other tenant: only the tenant-neutral part


def test_hot_prefixes_are_per_tenant_and_bounded(tiny_gguf):
    secret = "Private instructions: " + "the codename is bluebird and the launch is in march " * 6
    cfg = PromptConfig(tenant_instructions={"acme": secret, "globex": secret})  # identical tokens, different owners
    gen = generator(tiny_gguf, hot_prefixes=4, hot_prefix_min_tokens=16, prompt=cfg)

    def ask_as(tenant: str, question: str) -> RequestState:
        return ask(gen, Query(text=question, tenant=tenant))

    a1 = ask_as("acme", "What is the capital of France?")
    assert a1.usage.attrs["hot_prefix"] == "miss" and a1.usage.cache_misses == 1
    b1 = ask_as("globex", "What is the capital of France?")
    # acme's saved prefix holds the same tokens, but it is never used for globex
    assert b1.usage.attrs["hot_prefix"] == "miss"
    assert b1.usage.attrs["reused_tokens"] < b1.usage.attrs["stable_prefix_tokens"]
    a2 = ask_as("acme", "Which river runs through Paris?")
    assert a2.usage.attrs["hot_prefix"] == "hit" and a2.usage.cache_hits == 1
    assert a2.usage.attrs["reused_tokens"] >= a2.usage.attrs["stable_prefix_tokens"]
    # the restored KV is the real thing: greedy decoding gives what a cold run of the same request gives
    gen.engine.truncate(0)
    cold = ask(generator(tiny_gguf, prompt=cfg), Query(text="Which river runs through Paris?", tenant="acme"))
    assert cold.usage.attrs["hot_prefix"] == "off" and cold.usage.attrs["reused_tokens"] == 0
    assert a2.answer.text == cold.answer.text

    cache = gen.engine.prefixes
    assert len(cache) == 2
    assert cache.bytes_used == sum(item.nbytes for item in cache.items())
    stable = a1.usage.attrs["stable_prefix_tokens"]
    assert cache.bytes_used >= 2 * stable * KV_BYTES_PER_TOKEN_F16  # the KV cells themselves are counted


def test_quantized_kv_on_an_unsuitable_head_size_is_a_clear_error(tiny_gguf):
    from ragopt.errors import InputError

    with pytest.raises(InputError, match="divisible by 32"):
        generator(tiny_gguf, kv_type="q8_0").warm()


def test_ask_cli_streams_answer_then_trace(tiny_gguf, capsys):
    from ragopt.cli import main

    assert main(["ask", "--model", str(tiny_gguf), "--max-tokens", "12", "--n-ctx", "1024", "What is the capital of France?"]) == 0
    captured = capsys.readouterr()
    assert "answering from the question alone" in captured.err
    out = captured.out
    assert out.index("trace:") > 0 and "generate" in out and "TTFT" in out and "wall-clock from arrival" in out and "TPOT" in out
    assert "tokens in" in out and "reused" in out and "tokens out 12" in out

    assert main(["ask", "--extractive", "anything"]) == 0
    assert "No passages were retrieved" in capsys.readouterr().out


CITED_SENTENCE = r"[^\[\] \n.!?](?:[^\[\]\n.!?]|[0-9]\.[0-9])* ?(?:\[\d+\]){1,3}\."


def test_grammar_makes_every_sentence_end_with_a_valid_citation(tiny_gguf):
    gen = generator(tiny_gguf, n_ctx=2048, max_tokens=1200, citations="grammar")
    result = pipeline(gen).run("What is the capital of France?")
    answer, attrs = result.answer, result.trace.span("generate").usage.attrs
    assert attrs["citations"] == "grammar"
    assert answer.finish_reason == "stop"  # after its last sentence the grammar admits only end-of-generation
    assert re.fullmatch(rf"{CITED_SENTENCE}(?: {CITED_SENTENCE}){{0,2}}", answer.text), answer.text
    assert answer.citations and all(c.valid for c in answer.citations) and attrs["invalid_citations"] == []
    assert set(marker_numbers(answer.text)) <= {1, 2, 3}


def test_grammar_without_passages_decodes_freely(tiny_gguf):
    gen = generator(tiny_gguf, max_tokens=8, citations="grammar")
    result = pipeline(gen, []).run("What is the capital of France?")
    assert result.answer.finish_reason == "length" and result.answer.citations == []


def test_an_output_budget_that_leaves_no_room_for_a_prompt_is_refused_in_the_config():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="max_tokens \\(256\\) must be smaller than n_ctx \\(256\\)"):
        gl.GeneratorConfig(n_ctx=256, max_tokens=256)
