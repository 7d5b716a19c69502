"""Decoding on a live KV: prompt-lookup speculation against plain greedy decoding, on real llama.cpp models."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("llama_cpp")

from ragopt.backends.llama_decode import Decoder, top2_gap
from ragopt.backends.llama_engine import batch_invariant, load_engine

PASSAGE = ("The HelixLab dictionary stores fasting glucose as LAB_GLU_FAST in mmol/L, random glucose as LAB_GLU_RAND "
           "in mmol/L, and point-of-care glucose as LAB_GLU_POC in mmol/L; the source table LAB_RESULT_CHEM keeps mg/dL.")


def decode(engine, prompt: list[int], n: int, draft_tokens: int, margins: list[float] | None = None) -> tuple[list[int], Decoder]:
    engine.truncate(0)
    decoder = Decoder(engine, prompt, draft_tokens=draft_tokens, margins=margins)
    return list(itertools.islice(decoder.tokens(engine.eval_prompt(prompt, 0)), n)), decoder


def test_rejected_drafts_leave_no_trace_in_the_kv(tiny_gguf):
    engine = load_engine(tiny_gguf, n_ctx=512, n_batch=32, n_threads=1, kv_type="f16")
    try:
        prompt = engine.renderer.tokenize("the river and the king the river and the queen the river and the " * 3)
        tokens, decoder = decode(engine, prompt, 60, draft_tokens=4)
        counts = decoder.counts
        assert counts.drafted > counts.accepted >= 0 and counts.verify_batches > 0  # random weights reject drafts
        # every step gives one token plus the drafts it accepted (the last step's maybe not all read)
        assert 59 <= counts.steps + counts.accepted < 59 + 4 + 1
        # the live KV holds the prompt and the yielded tokens (and accepted drafts not read yet), never a rejected draft
        n = min(engine.n_tokens, len(prompt) + len(tokens))
        assert [int(t) for t in engine.llm.input_ids[:n]] == (prompt + tokens)[:n]
        assert len(prompt) + 59 <= engine.n_tokens <= len(prompt) + 60 + 4
        assert engine.prompt_end == len(prompt)  # decoded positions never count as reusable prompt KV
    finally:
        engine.llm.close()


def test_prompt_lookup_gives_plain_greedy_tokens_in_fewer_steps(smollm2):
    engine = load_engine(smollm2, n_ctx=1024, n_batch=64, n_threads=1, kv_type="f16")
    try:
        text = engine.renderer.render([{"role": "user", "content": f"Repeat this text word for word: {PASSAGE}"}])
        prompt = engine.renderer.tokenize(text)
        margins: list[float] = []
        plain, plain_decoder = decode(engine, prompt, 40, draft_tokens=0, margins=margins)
        fast, decoder = decode(engine, prompt, 40, draft_tokens=3)
        assert fast == plain  # verification keeps exactly the model's greedy choices here
        assert plain_decoder.counts.steps == 39 and plain_decoder.counts.drafted == 0
        assert decoder.counts.accepted >= 0.5 * decoder.counts.drafted > 0  # the answer copies the prompt
        assert decoder.counts.steps < 39 - 15  # many tokens came out of verification batches
        assert len(margins) == 40 and all(m >= 0 for m in margins)
    finally:
        engine.llm.close()


@pytest.mark.parametrize("flash_attn", [True, False])
def test_a_batch_gets_the_logits_of_its_tokens_decoded_one_by_one_only_with_flash_attention(smollm2, flash_attn):
    """What keeps prompt lookup's answers greedy: a verification batch must score its tokens as single steps do."""
    import numpy as np

    engine = load_engine(smollm2, n_ctx=1024, n_batch=64, n_threads=1, kv_type="f16", flash_attn=flash_attn)
    try:
        prompt = engine.renderer.tokenize(engine.renderer.render([{"role": "user", "content": PASSAGE * 3}]))
        engine.eval_prompt(prompt, 0)
        start, following = engine.n_tokens, prompt[10:18]
        one_by_one = np.stack([engine.decode([token])[0].copy() for token in following])
        engine.truncate(start)
        batch = engine.decode(following, all_logits=True).copy()
        assert np.array_equal(batch, one_by_one) == flash_attn  # without it, up to 0.6 apart (measured)
        assert batch_invariant(flash_attn, n_threads=1) == flash_attn and not batch_invariant(True, n_threads=2)
    finally:
        engine.llm.close()


def test_top2_gap():
    import numpy as np

    assert top2_gap(np.array([0.5, 3.0, 2.25, -1.0], dtype=np.float32)) == pytest.approx(0.75)
    assert top2_gap(np.array([1.0, 1.0], dtype=np.float32)) == 0.0
