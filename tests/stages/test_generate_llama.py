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

from ragopt.errors import AdmissionError
from ragopt.errors import WiringError
from ragopt.pipeline import Pipeline, RequestState, Step
from ragopt.resources import Resources
from ragopt.shipped import shipped_dataset
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


class ManualClock:
    """A clock that moves only when told: durations measured with it are exact."""

    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


SHARED = Resources()


@pytest.fixture(autouse=True, scope="module")
def _close_models():
    yield
    SHARED.close()


def generator(model: Path, resources: Resources | None = SHARED, clock=time.perf_counter, **kw) -> gl.LlamaGenerator:
    kw.setdefault("n_ctx", 1024)
    kw.setdefault("max_tokens", 24)
    kw.setdefault("n_batch", 32)  # the tiny prompts span several chunks, so chunk-wise reuse is exercised
    kw.setdefault("repeat_stop", 0)  # the random-weight model repeats itself; its own test turns this on
    return gl.LlamaGenerator(gl.GeneratorConfig(model=str(model), **kw), resources, clock=clock)


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


def test_ttft_counts_from_arrival_and_tpot_is_the_time_between_tokens(tiny_gguf):
    clock = ManualClock()
    gen = generator(tiny_gguf, max_tokens=6, clock=clock)

    def slow_client(piece: str) -> None:  # each piece takes the client 10 ms
        clock.advance(0.010)

    state = gen.prompt_stage().run(RequestState(query=Query(text="What is the capital of France?"), hits=make_hits(),
                                                arrival=clock.now - 0.200, on_token=slow_client))  # arrived 200 ms ago
    a = gen.run(state).usage.attrs
    assert a["ttft_ms"] == pytest.approx(200.0)  # the time before the generator is part of TTFT
    assert a["decode_tokens"] == 6 and a["queue_ms"] == 0.0
    assert a["tpot_ms"] == pytest.approx(10.0) and a["decode_ms"] == pytest.approx(50.0)  # 5 gaps of 10 ms
    assert a["tokens_per_s"] == pytest.approx(100.0)


def test_a_generator_without_its_prompt_stage_is_a_wiring_error(tiny_gguf):
    gen = generator(tiny_gguf)
    with pytest.raises(WiringError, match="'generate' reads 'prompt'"):
        Pipeline([FixedHits(make_hits()), gen])
    stage = gen.prompt_stage()
    assert isinstance(stage, BuildPrompt) and stage.budget_tokens == 1024 - 24 and stage.config == gen.config.prompt


def test_streaming_delivers_the_first_piece_before_the_rest_is_decoded(tiny_gguf):
    gen = generator(tiny_gguf, max_tokens=300)
    engine = gen.engine
    kv_at_piece: list[int] = []
    pieces: list[str] = []

    def on_token(piece: str) -> None:  # how far decoding had gone when each piece arrived
        kv_at_piece.append(engine.n_tokens)
        pieces.append(piece)

    result = pipeline(gen).run("What is the capital of Italy?", on_token=on_token)
    prompt = result.trace.span("prompt").usage.attrs["prompt_tokens"]
    assert result.trace.span("generate").usage.attrs["decode_tokens"] == 300 and len(kv_at_piece) >= 100
    # A generator that buffered its answer would deliver every piece after decoding 300 tokens; this one
    # delivers the first while the KV holds the prompt alone, and each later piece one decode step later.
    assert kv_at_piece[0] == prompt and kv_at_piece[-1] >= prompt + 250
    assert kv_at_piece == sorted(kv_at_piece)
    assert "".join(pieces).strip() == result.answer.text


def test_consecutive_requests_reuse_the_stable_prefix(tiny_gguf):
    gen = generator(tiny_gguf)
    gen.engine.truncate(0)
    pipeline(gen, make_hits(prefix="a")).run("What is the capital of France?")
    second = pipeline(gen, make_hits(TEXTS[::-1], prefix="b")).run("Which river runs through Berlin?").trace
    stable = second.span("prompt").usage.attrs["stable_prefix_tokens"]
    a = second.span("generate").usage.attrs
    assert a["reused_tokens"] == stable // 32 * 32 > 50  # whole n_batch chunks of the shared prefix
    # the prefix arithmetic agrees with llama.cpp's own count of prompt tokens evaluated
    assert a["prompt_tokens_evaluated"] == a["prefill_tokens"] > 0
    assert a["prompt_tokens_evaluated"] < second.span("prompt").usage.attrs["prompt_tokens"]
    assert 0 < a["reused_fraction"] < 1


def test_deadline_gives_partial_incomplete_answer_then_next_request_is_normal(tiny_gguf):
    gen = generator(tiny_gguf, n_ctx=2048, max_tokens=1500)
    pipe = pipeline(gen)
    pieces: list[str] = []
    state = RequestState(query=Query(text="What is the capital of France?"), arrival=time.perf_counter(),
                         deadline=time.monotonic() + 3600)

    def client(piece: str) -> None:  # the deadline passes while the tenth piece is delivered
        pieces.append(piece)
        if len(pieces) == 10:
            state.deadline = time.monotonic()

    state.on_token = client
    late = pipe.run_state(state)
    assert late.answer.incomplete and late.answer.finish_reason == "deadline"
    assert late.answer.text and "".join(pieces).strip() == late.answer.text and len(pieces) == 10
    attrs = late.trace.span("generate").usage.attrs
    assert 10 <= attrs["decode_tokens"] < 1500 and attrs["incomplete"] is True
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


def wait_for_waiters(engine, n: int) -> None:
    """Until n requests wait for the engine's lock (an event, not a guessed sleep)."""
    give_up = time.monotonic() + 30
    while engine.lock.waiting < n:
        assert time.monotonic() < give_up, "the second request never queued"
        time.sleep(0.001)


def test_one_model_shared_by_concurrent_requests_with_measured_queue(tiny_gguf):
    clock = ManualClock()
    gen = generator(tiny_gguf, max_tokens=25, clock=clock)
    results: dict[str, RequestState] = {}
    first_decoding, second_queued = threading.Event(), threading.Event()

    def first_client(piece: str) -> None:  # holds the model until the second request waits, then 50 ms more
        if not first_decoding.is_set():
            first_decoding.set()
            assert second_queued.wait(30)
            clock.advance(0.050)

    def call(name: str, on_token) -> None:
        results[name] = ask(gen, f"question {name}", on_token=on_token)

    first = threading.Thread(target=call, args=("first", first_client))
    first.start()
    assert first_decoding.wait(30)
    second = threading.Thread(target=call, args=("second", None))
    second.start()
    wait_for_waiters(gen.engine, 1)
    second_queued.set()
    first.join()
    second.join()
    assert results["first"].answer.text and results["second"].answer.text
    second_attrs = results["second"].usage.attrs
    assert second_attrs["queue_ms"] == pytest.approx(50.0)  # exactly the time the first one held the model
    assert second_attrs["ttft_ms"] >= second_attrs["queue_ms"]  # TTFT includes the wait
    assert results["first"].usage.attrs["queue_ms"] == 0.0


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
    assert a2.usage.attrs["reused_tokens"] == a2.usage.attrs["stable_prefix_tokens"] // 32 * 32  # saved in whole chunks
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


@pytest.mark.parametrize("threads, noted", [(1, False), (2, True)])
def test_ask_says_when_prompt_lookup_may_change_a_greedy_answer(tiny_gguf, capsys, threads, noted):
    from ragopt.cli import main

    args = ["ask", "--model", str(tiny_gguf), "--max-tokens", "4", "--n-ctx", "512", "--speculative", "prompt_lookup"]
    assert main([*args, "--threads", str(threads), "Why?"]) == 0
    assert ("prompt lookup may change an answer at a near tie" in capsys.readouterr().err) == noted


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


# --- answers that do not depend on what the engine served before (SmolLM2, the shipped set) ---

SHIPPED = shipped_dataset()


def shipped_requests(n: int) -> list[tuple[Query, list[Hit]]]:
    """n shipped-set questions spread over the set, each with its two most relevant documents as passages."""
    import json

    docs = {d["id"]: d for d in map(json.loads, (SHIPPED / "corpus.jsonl").read_text().splitlines())}
    questions = [json.loads(line) for line in (SHIPPED / "questions.jsonl").read_text().splitlines()]
    picked = questions[:: len(questions) // n][:n]
    out = []
    for q in picked:
        grades = q.get("relevance") or {e["doc_id"]: 1 for e in q["evidence"]}
        best = sorted(grades, key=lambda d: (-grades[d], d))[:2]
        hits = [Hit(chunk=Chunk(id=f"{d}#0", doc_id=d, start=0, end=len(docs[d]["text"]), text=docs[d]["text"],
                                title=docs[d].get("title", d)), score=1.0 / (i + 1), rank=i + 1, retriever="evidence")
                for i, d in enumerate(best)]
        out.append((Query(text=q["question"], tenant=q.get("tenant"), scopes=q.get("scopes", [])), hits))
    return out


def test_greedy_answers_are_the_same_whatever_the_kv_cache_held(smollm2):
    """16 shipped-set questions through every reuse pattern and through prompt lookup, each compared with the
    same request decoded plainly on an empty KV.

    Before chunk-aligned reuse, 3 of 16 differed after a repeat and after a cut-off answer (the whole prompt
    reused, its last token evaluated alone). Short passages and answers keep this at about a minute."""
    model = smollm2
    policy = "Policy: answer for the data office; name the table or field you mean and give units exactly."
    layout = PromptConfig(max_passage_chars=100, tenant_instructions={"north-hospital": policy, "south-hospital": policy})
    shipped_batch = gl.GeneratorConfig.model_fields["n_batch"].default  # the reuse granularity users get
    settings = dict(n_ctx=1024, prompt=layout, hot_prefixes=8, hot_prefix_min_tokens=32, n_batch=shipped_batch, repeat_stop=3)
    resources = Resources()
    gen = generator(model, resources, max_tokens=8, **settings)
    cut = generator(model, resources, max_tokens=2, **settings)  # a client that gave up early
    lookup = generator(model, resources, max_tokens=8, speculative="prompt_lookup", **settings)
    engine = gen.engine
    assert cut.engine is engine and lookup.engine is engine and engine.chunk == shipped_batch
    accepted = 0
    requests = shipped_requests(16)
    differing: dict[str, list[int]] = {}
    reused: dict[str, int] = {}

    def check(name: str, i: int, warm: RequestState, cold: RequestState) -> None:
        reused[name] = reused.get(name, 0) + warm.usage.attrs["reused_tokens"]
        if warm.answer.text != cold.answer.text:
            differing.setdefault(name, []).append(i)

    try:
        ask(gen, "Which tables does the HelixLab dictionary describe?", requests[-1][1])  # some earlier request
        for i, (tenant_query, hits) in enumerate(requests):
            query = Query(text=tenant_query.text)
            after_other = ask(gen, query, hits)  # the live KV holds another prompt with the same system prompt
            engine.truncate(0)
            cold = ask(gen, query, hits)
            check("shared system prompt", i, after_other, cold)
            check("repeated question", i, ask(gen, query, hits), cold)
            speculated = ask(lookup, query, hits)
            accepted += speculated.usage.attrs["accepted_tokens"]
            check("prompt lookup", i, speculated, cold)
            ask(cut, query, hits)
            check("after a cut-off answer", i, ask(gen, query, hits), cold)
            ask(gen, "And which team owns it?", hits)
            check("follow-up", i, ask(gen, query, hits), cold)
            # a tenant's saved prefix: saved by a request on an empty KV, restored after the KV was emptied
            engine.truncate(0)
            engine.prefixes = None  # this tenant's prefix was saved for an earlier question: save it afresh
            saving = ask(gen, tenant_query, hits)
            engine.truncate(0)
            restored = ask(gen, tenant_query, hits)
            assert (saving.usage.attrs["hot_prefix"], restored.usage.attrs["hot_prefix"]) == ("miss", "hit")
            check("saved tenant prefix", i, restored, saving)
    finally:
        resources.close()
    assert differing == {}
    assert len(reused) == 6 and all(n >= 16 * shipped_batch for n in reused.values()), reused  # each pattern reused KV
    assert accepted > 0  # drafts were verified and kept, so the comparison covers verification batches
