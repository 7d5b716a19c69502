"""Short greedy completions on the generator's engine: bounded output, choices by grammar, KV tenant isolation."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.errors import ContextOverflow
from ragopt.resources import Resources
from ragopt.stages.generate_llama import GeneratorConfig, get_engine
from ragopt.stages.llm_text import complete, prompt_tokens

pytest.importorskip("llama_cpp")

SYSTEM = "You answer in one word."


@pytest.fixture
def engine(tiny_gguf: Path):
    with Resources() as resources:
        yield get_engine(GeneratorConfig(model=str(tiny_gguf), n_ctx=512, max_tokens=16, n_batch=8), resources)


def test_output_is_bounded_and_counted(engine):
    done = complete(engine, SYSTEM, "name a city", ("acme", ()), max_tokens=5, stop=())
    assert done.tokens_out == 5 and done.finish_reason == "length" and done.text
    assert done.tokens_in == prompt_tokens(engine, SYSTEM, "name a city")


def test_choices_constrain_the_output_to_one_of_them(engine):
    done = complete(engine, SYSTEM, "pick one", ("acme", ()), max_tokens=32, choices=["lab_chem_ingest", "LAB_NA"])
    assert done.text in ("lab_chem_ingest", "LAB_NA") and done.finish_reason == "stop"


def test_another_tenant_finds_only_the_public_prefix_in_the_kv(engine):
    cuts = []
    truncate = engine.truncate
    engine.truncate = lambda n: (cuts.append(n), truncate(n))  # record what the helper keeps, then do it
    try:
        complete(engine, SYSTEM, "acme's private text", ("acme", ("ops",)), max_tokens=3, stop=())
        public = engine.public_tokens
        assert engine.owner == ("acme", ("ops",)) and 0 < public < engine.llm.n_tokens
        cuts.clear()
        complete(engine, SYSTEM, "globex asks", ("globex", ()), max_tokens=3, stop=())
        assert cuts[0] == public and engine.owner == ("globex", ())  # then prompt evaluation from a chunk boundary
        public = engine.public_tokens
        cuts.clear()
        complete(engine, SYSTEM, "globex again", ("globex", ()), max_tokens=3, stop=())
        assert cuts and min(cuts) >= public // 8 * 8 > 0  # the same owner keeps its own tokens, in whole chunks
    finally:
        del engine.truncate


def test_a_prompt_over_the_context_is_refused_before_the_lock(engine):
    with pytest.raises(ContextOverflow, match="exceed the context"):
        complete(engine, SYSTEM, "word " * 600, (None, ()), max_tokens=8)
    assert engine.lock.acquire(0) and engine.lock.release() is None  # the lock was never taken
