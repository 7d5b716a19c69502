"""The llama.cpp generator on a tiny random-weight GGUF: the real llama.cpp code path, no mocks.

The tiny model's text is noise, but its timings, streaming, KV reuse, deadlines, token budget and admission
are those of llama.cpp itself.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

from fixtures.tiny_gguf import KV_BYTES_PER_TOKEN_F16

from ragopt.capacity import AdmissionError
from ragopt.cache import CacheKey
from ragopt.pipeline import Pipeline, RequestState, Step
from ragopt.stages import generate_llama as gl
from ragopt.stages.generate_extractive import ExtractiveGenerator
from ragopt.stages.prompt import PromptConfig
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


def generator(model: Path, **kw) -> gl.LlamaGenerator:
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("max_tokens", 24)
    return gl.LlamaGenerator(model=str(model), **kw)


@pytest.fixture(autouse=True, scope="module")
def _unload():
    yield
    gl.unload_all()


def test_trace_has_ttft_tpot_tokens_and_prompt(tiny_gguf):
    result = Pipeline([FixedHits(make_hits()), generator(tiny_gguf)]).run("What is the capital of France?")
    span = result.trace.span("generate")
    a = span.usage.attrs
    assert a["ttft_ms"] > 0 and a["tpot_ms"] > 0 and a["tokens_per_s"] > 0
    assert a["ttft_source"] == "llama_perf"
    # llama.cpp's counters agree with the wall clock: prefill happens inside the time to the first token
    assert a["ttft_ms"] <= a["ttft_wall_ms"] + 1.0
    assert a["decode_tokens"] == 24 == span.usage.tokens_out
    assert a["prompt_tokens"] == span.usage.tokens_in > 100
    assert a["prompt_tokens_evaluated"] + a["reused_tokens"] == a["prompt_tokens"]
    assert a["queue_ms"] >= 0 and a["finish_reason"] == "length" and a["incomplete"] is False
    assert result.answer.finish_reason == "length" and result.answer.text
    assert "[1] Paris" in result.state.prompt and result.state.prompt.endswith("<|im_start|>assistant\n")
    summary = summarize([result.trace])
    assert summary["ttft_ms"]["n"] == 1 and summary["tpot_ms"]["n"] == 1


def test_streaming_first_token_arrives_before_generation_ends(tiny_gguf):
    arrivals: list[tuple[float, str]] = []

    def on_token(piece: str) -> None:  # a fast client: it adds no time of its own
        arrivals.append((time.perf_counter(), piece))

    gen = generator(tiny_gguf, max_tokens=300)
    result = Pipeline([FixedHits(make_hits()), gen]).run("What is the capital of Italy?", on_token=on_token)
    t_end = time.perf_counter()
    decode_s = result.trace.span("generate").usage.attrs["decode_ms"] / 1000
    assert len(arrivals) >= 100
    # A generator that buffered its answer would deliver everything at the end; streaming delivers the first
    # piece while most of the decoding is still to come.
    assert t_end - arrivals[0][0] > 0.5 * decode_s > 0
    assert "".join(p for _, p in arrivals).strip() == result.answer.text


def test_consecutive_requests_reuse_the_stable_prefix(tiny_gguf):
    gen = generator(tiny_gguf)
    pipe1 = Pipeline([FixedHits(make_hits(prefix="a")), gen])
    pipe2 = Pipeline([FixedHits(make_hits(TEXTS[::-1], prefix="b")), gen])
    pipe1.run("What is the capital of France?")
    second = pipe2.run("Which river runs through Berlin?").trace.span("generate").usage.attrs
    assert second["reused_tokens"] >= second["stable_prefix_tokens"] > 50
    assert second["reused_tokens"] == second["reused_tokens_predicted"]  # llama.cpp's n_p_eval agrees with the prefix math
    assert second["prompt_tokens_evaluated"] < second["prompt_tokens"]
    assert 0 < second["reused_fraction"] < 1


def test_deadline_gives_partial_incomplete_answer_then_next_request_is_normal(tiny_gguf):
    gen = generator(tiny_gguf, n_ctx=2048, max_tokens=1500)
    pipe = Pipeline([FixedHits(make_hits()), gen])
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
    normal = Pipeline([FixedHits(make_hits()), gen_short]).run("What is the capital of Germany?", deadline_s=30)
    assert not normal.answer.incomplete and normal.answer.finish_reason == "length"
    assert normal.trace.span("generate").usage.attrs["decode_tokens"] == 20
    assert normal.trace.degraded == []


def test_prompt_longer_than_context_is_fitted_never_a_crash(tiny_gguf):
    long_texts = [(f"Doc {i}", " ".join(["the capital city of the country is old"] * 12)) for i in range(30)]
    history = [Turn(role="user" if i % 2 == 0 else "assistant", content="tell me about the river and the king " * 10) for i in range(6)]
    gen = generator(tiny_gguf, n_ctx=512, max_tokens=32, prompt=PromptConfig(max_passages=30))
    result = Pipeline([FixedHits(make_hits(long_texts)), gen]).run(Query(text="What is the capital?", history=history))
    attrs = result.trace.span("generate").usage.attrs
    assert attrs["prompt_tokens"] <= 512 - 32
    assert attrs["dropped_passages"] and attrs["dropped_passages"][-1] == "c29"
    assert result.answer.text and result.answer.finish_reason == "length"

    # even a question alone longer than the window is cut to fit
    giant = Query(text="what is the capital of france " * 400)
    result = Pipeline([FixedHits(make_hits()), gen]).run(giant)
    attrs = result.trace.span("generate").usage.attrs
    assert attrs["question_truncated"] and attrs["prompt_tokens"] <= 480
    assert result.answer.text


def test_citations_are_parsed_against_the_passages_in_the_prompt(tiny_gguf):
    # stop strings come from the model's own greedy output, so this runs the stop filter for real
    gen = generator(tiny_gguf, max_tokens=40)
    pipe = Pipeline([FixedHits(make_hits()), gen])
    full = pipe.run("What is the capital of France?").answer.text
    stop = full[12:16]
    stopped = Pipeline([FixedHits(make_hits()), generator(tiny_gguf, max_tokens=40, stop=(stop,))]).run("What is the capital of France?")
    assert stopped.answer.finish_reason == "stop" and stop not in stopped.answer.text
    assert full.startswith(stopped.answer.text)


def test_a_failing_stream_consumer_leaves_the_model_usable(tiny_gguf):
    gen = generator(tiny_gguf)

    def disconnect(piece: str) -> None:
        raise ConnectionError("client went away")

    with pytest.raises(ConnectionError):
        gen.run(RequestState(query=Query(text="What is the capital of France?"), hits=make_hits(), on_token=disconnect))
    assert gen.engine.lock.waiting == 0 and gen.engine.lock.acquire(timeout=0)  # the lock was released
    gen.engine.lock.release()
    state = gen.run(RequestState(query=Query(text="What is the capital of France?"), hits=make_hits()))
    assert state.answer.finish_reason == "length" and state.usage.attrs["reused_tokens"] == 0


def test_sampling_with_a_seed_is_reproducible(tiny_gguf):
    gen = generator(tiny_gguf, temperature=0.9, seed=7, max_tokens=20)
    pipe = Pipeline([FixedHits(make_hits()), gen])
    a = pipe.run("What is the capital of France?").answer.text
    pipe.run("Something else entirely, to change the KV state")
    b = pipe.run("What is the capital of France?").answer.text
    assert a == b


def test_admission_refuses_over_budget_and_pipeline_falls_back(tiny_gguf):
    budget = 200 * KV_BYTES_PER_TOKEN_F16  # room for 200 tokens of KV: less than prompt + max_tokens
    gen = generator(tiny_gguf, kv_budget_bytes=budget)
    with pytest.raises(AdmissionError, match="over the KV budget"):
        Pipeline([FixedHits(make_hits()), gen]).run("What is the capital of France?")
    result = Pipeline([FixedHits(make_hits()), Step(gen, fallback=ExtractiveGenerator())]).run("What is the capital of France?")
    assert result.answer.generator == "extractive" and result.answer.citations
    assert result.trace.degraded[0].startswith("generate: AdmissionError:")
    assert generator(tiny_gguf, kv_budget_bytes=4096 * KV_BYTES_PER_TOKEN_F16).run(
        RequestState(query=Query(text="q"), hits=make_hits())
    ).answer.text


def test_one_model_shared_by_concurrent_requests_with_measured_queue(tiny_gguf):
    gen = generator(tiny_gguf, max_tokens=25)
    assert gen.engine is generator(tiny_gguf, max_tokens=5).engine  # one Llama per model and context settings
    results: dict[str, RequestState] = {}

    def slow(piece: str) -> None:
        time.sleep(0.004)

    def call(name: str, delay: float) -> None:
        time.sleep(delay)
        state = RequestState(query=Query(text=f"question {name}"), hits=make_hits(), on_token=slow)
        results[name] = gen.run(state)

    threads = [threading.Thread(target=call, args=("first", 0.0)), threading.Thread(target=call, args=("second", 0.02))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["first"].answer.text and results["second"].answer.text
    assert results["second"].usage.attrs["queue_ms"] > 20  # waited for the first request's ~100 ms of decoding
    assert results["first"].usage.attrs["queue_ms"] < 20


def test_queue_timeout_raises_so_the_fallback_answers(tiny_gguf):
    gen = generator(tiny_gguf)
    engine = gen.engine
    assert engine.lock.acquire()
    try:
        result = Pipeline([FixedHits(make_hits()), Step(gen, fallback=ExtractiveGenerator())]).run("capital of France?", deadline_s=0.1)
    finally:
        engine.lock.release()
    assert result.answer.generator == "extractive"
    assert "QueueTimeout" in result.trace.degraded[0]


def test_live_kv_is_not_reused_across_tenants_beyond_the_neutral_prefix(tiny_gguf):
    gen = generator(tiny_gguf)
    hits = make_hits()

    def ask(tenant: str) -> dict:
        state = RequestState(query=Query(text="What is the capital of France?", tenant=tenant), hits=hits)
        return gen.run(state).usage.attrs

    ask("acme")
    same = ask("acme")
    other = ask("globex")
    assert same["reused_tokens"] > same["stable_prefix_tokens"]  # same tenant: passages reused too
    assert other["reused_tokens"] <= other["stable_prefix_tokens"]  # other tenant: only the tenant-neutral part


def test_hot_prefixes_are_per_tenant_and_bounded(tiny_gguf):
    secret = "Private instructions: " + "the codename is bluebird and the launch is in march " * 6
    cfg = PromptConfig(tenant_instructions={"acme": secret, "globex": secret})  # identical tokens, different owners
    gen = generator(tiny_gguf, hot_prefixes=4, hot_prefix_min_tokens=16, prompt=cfg)

    def ask(tenant: str, question: str) -> RequestState:
        return gen.run(RequestState(query=Query(text=question, tenant=tenant), hits=make_hits()))

    a1 = ask("acme", "What is the capital of France?")
    assert a1.usage.attrs["hot_prefix"] == "miss" and a1.usage.cache_misses == 1
    b1 = ask("globex", "What is the capital of France?")
    # acme's saved prefix holds the same tokens, but it is never used for globex
    assert b1.usage.attrs["hot_prefix"] == "miss"
    assert b1.usage.attrs["reused_tokens"] < b1.usage.attrs["stable_prefix_tokens"]
    a2 = ask("acme", "Which river runs through Paris?")
    assert a2.usage.attrs["hot_prefix"] == "hit" and a2.usage.cache_hits == 1
    assert a2.usage.attrs["reused_tokens"] >= a2.usage.attrs["stable_prefix_tokens"]
    # the restored KV is the real thing: greedy decoding gives what a cold run of the same request gives
    gen.engine.truncate(0)
    cold = generator(tiny_gguf, prompt=cfg).run(RequestState(query=Query(text="Which river runs through Paris?", tenant="acme"), hits=make_hits()))
    assert cold.usage.attrs["hot_prefix"] == "off" and cold.usage.attrs["reused_tokens"] == 0
    assert a2.answer.text == cold.answer.text

    cache = gen.engine.prefixes
    assert len(cache) == 2
    assert cache.bytes_used == sum(item.nbytes for item in cache._items.values())
    stable = a1.usage.attrs["stable_prefix_tokens"]
    assert cache.bytes_used >= 2 * stable * KV_BYTES_PER_TOKEN_F16  # the KV cells themselves are counted


def test_prefix_state_cache_accounting_and_isolation():
    cache = gl.PrefixStateCache(max_entries=10, max_bytes=1000)
    key = lambda tenant: CacheKey(namespace="kv_prefix", tenant=tenant, model="m", prompt_version="v", payload=(1, 2, 3))  # noqa: E731
    item = gl._SavedPrefix(tokens=(1, 2, 3), state=b"x" * 388)
    assert item.nbytes == 400
    assert cache.put(key("a"), item) and cache.bytes_used == 400
    assert cache.get(key("b"), (1, 2, 3)) is None  # another tenant, same tokens: never found
    assert cache.get(key("a"), (1, 2, 4)) is None  # same key, other tokens: never returned
    assert cache.get(key("a"), (1, 2, 3)) is item
    cache.put(key("b"), item)
    cache.put(key("c"), item)  # 1200 bytes > 1000: the least recently used goes
    assert cache.bytes_used == 800 and cache.evictions == 1 and len(cache) == 2
    assert not cache.put(key("d"), gl._SavedPrefix(tokens=(), state=b"y" * 1001))  # larger than the bound
    assert cache.bytes_used == 800


def test_fifo_lock_order_and_timeout():
    lock = gl.FifoLock()
    assert lock.acquire()
    assert not lock.acquire(timeout=0.01)
    order: list[int] = []

    def waiter(i: int) -> None:
        assert lock.acquire(timeout=5)
        order.append(i)
        lock.release()

    threads = []
    for i in range(3):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(0.02)
    assert lock.waiting == 3
    lock.release()
    for t in threads:
        t.join()
    assert order == [0, 1, 2] and lock.waiting == 0


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
    assert out.index("trace:") > 0 and "generate" in out and "TTFT (prefill)" in out and "TPOT" in out
    assert "tokens in" in out and "reused" in out and "tokens out 12" in out

    assert main(["ask", "--extractive", "anything"]) == 0
    assert "No passages were retrieved" in capsys.readouterr().out
