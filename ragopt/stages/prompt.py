"""Prompt layout for KV prefix reuse, and the token budget that fits a request into the context window.

Layout, stable first so consecutive requests share the longest token prefix (llama-cpp-python reuses the
longest common prefix of its previous call):

    system message   system prompt, instructions, citation rules       same for every request
                     [tenant instructions]                              same for every request of a tenant
                     [the request's instructions]                       a chat's system/developer messages
    user message     numbered passages [1]..[k], best-ranked first     vary per request
                     conversation so far (summary / oldest..newest turns)
                     the question

The chat template comes from the model (the generator renders the messages with it); here the layout is
model-agnostic: a `Renderer` turns messages into tokens, and `fit_prompt` keeps the prompt within
`budget_tokens`. It never returns a prompt over budget and never crashes on a long one. The system message is never
cut: the request's own instructions (`Query.instructions`) are kept whole or the request is refused (BadRequest
naming `messages`). What it gives up, in order, each step only as far as needed:

1. passages beyond the first, lowest-ranked first (the best passage is the one most likely to hold the answer);
2. verbatim history turns, oldest first (a summary turn, `Turn(role="system")` from the history stage, stays);
3. the summary turn, cut from its end (its lowest-priority lines come last), then dropped;
4. the last passage;
5. the question's tail.

So history never costs the answer its best evidence, and a long conversation is trimmed by the history rules
(recent turns and the summary outlive old turns) before the question loses its last passage.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from pydantic import Field

from ragopt.config import StrictModel, knob
from ragopt.errors import BadRequest, InputError
from ragopt.pipeline import RequestState
from ragopt.stages.prompt_search import LineCounts, largest, prefix_tokens
from ragopt.types import Hit, Query, Turn

if TYPE_CHECKING:
    from ragopt.tokencount import TokenCounter

DEFAULT_SYSTEM = "You are a careful assistant that answers questions from the numbered passages it is given."

DEFAULT_INSTRUCTIONS = (
    "Answer the question using only the passages. Be brief: one to three sentences.\n"
    "Cite the passages you used with their numbers in square brackets, like [1] or [2][3], "
    "right after the statement they support. Cite only passage numbers that appear below.\n"
    "If the passages do not contain the answer, say that you cannot answer from the sources."
)

NO_PASSAGES_NOTE = "(No passages were provided. Answer briefly from general knowledge, say that no sources were given, and do not cite.)"
_ROLE_LABELS = {"user": "User", "assistant": "Assistant", "system": "Summary"}  # a system turn is the history's summary


class PromptConfig(StrictModel):
    system: str = DEFAULT_SYSTEM
    instructions: str = Field(DEFAULT_INSTRUCTIONS, description="task and citation rules; part of the stable prefix")
    tenant_instructions: dict[str, str] = Field(
        default_factory=dict,
        description="extra system text per tenant; private to it (a cached prefix holding it is never reused for another tenant)",
    )
    max_passages: int | None = Field(None, ge=0, description="passages offered to the model before the token budget "
                                                              "applies (None: every retrieved one)")
    max_passage_chars: int | None = knob(1500, gt=0, description="longer passages are cut at a word boundary")
    max_history_turns: int = Field(6, ge=0, description="most recent turns kept before the token budget applies (a leading summary turn not counted; 0 = no history)")
    version: str = Field("v1", description="bump when the layout changes: it is part of cache keys")

    @property
    def prompt_version(self) -> str:
        return f"{self.version}-{self.fingerprint()}"


@dataclass(frozen=True)
class Passage:
    number: int  # the [n] the model cites
    hit: Hit
    text: str  # possibly cut to max_passage_chars

    @property
    def chunk_id(self) -> str:
        return self.hit.chunk.id


def number_passages(hits: Sequence[Hit], limit: int | None = None, max_chars: int | None = None) -> list[Passage]:
    """Passages in a deterministic order (rank, then chunk id), numbered from 1; duplicates of a chunk are dropped."""
    seen: set[str] = set()
    ordered = []
    for hit in sorted(hits, key=lambda h: (h.rank, -h.score, h.chunk.id)):
        if hit.chunk.id not in seen:
            seen.add(hit.chunk.id)
            ordered.append(hit)
    return [Passage(number=i, hit=h, text=_cut(h.chunk.text, max_chars)) for i, h in enumerate(ordered[:limit], start=1)]


@lru_cache(maxsize=1 << 14)  # a sweep numbers the same chunks' texts in every trial
def _cut(text: str, max_chars: int | None) -> str:
    text = " ".join(text.split())
    if max_chars is None or len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    space = cut.rfind(" ")
    if space > max_chars // 2:
        cut = cut[:space]
    return cut + " ..."


def format_passage(p: Passage) -> str:
    title = p.hit.chunk.title.strip()
    return f"[{p.number}] {title}\n{p.text}" if title else f"[{p.number}] {p.text}"


@dataclass
class PromptParts:
    """What goes into one prompt; `fit_prompt` removes passages and turns from it to meet the budget."""

    public_system: str  # identical for every tenant
    tenant_system: str  # private to `owner`
    passages: list[Passage]
    history: list[Turn]
    question: str
    request_system: str = ""  # the request's own instructions (Query.instructions), kept whole

    @property
    def plan_system(self) -> str:  # what every request of the tenant shares: the stable prefix
        return f"{self.public_system}\n\n{self.tenant_system}" if self.tenant_system else self.public_system

    @property
    def system(self) -> str:
        return f"{self.plan_system}\n\n{self.request_system}" if self.request_system else self.plan_system

    def user_message(self) -> str:
        blocks = []
        if self.passages:
            blocks.append("Passages:\n\n" + "\n\n".join(format_passage(p) for p in self.passages))
        else:
            blocks.append(NO_PASSAGES_NOTE)
        if self.history:
            lines = [f"{_ROLE_LABELS[t.role]}: {' '.join(t.content.split())}" for t in self.history]
            blocks.append("Conversation so far:\n" + "\n".join(lines))
        blocks.append(f"Question: {self.question.strip()}")
        return "\n\n".join(blocks)

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user_message()}]


def prompt_parts(query: Query, hits: Sequence[Hit], config: PromptConfig) -> PromptParts:
    public = f"{config.system.strip()}\n\n{config.instructions.strip()}".strip()
    tenant_text = config.tenant_instructions.get(query.tenant or "", "").strip() if query.tenant else ""
    history: list[Turn] = []
    if config.max_history_turns:
        summary = [t for t in query.history[:1] if t.role == "system"]  # a summary turn is not one of the turns counted
        turns = query.history[len(summary) :]
        history = summary + turns[max(len(turns) - config.max_history_turns, 0) :]
    return PromptParts(
        public_system=public,
        tenant_system=tenant_text,
        passages=number_passages(hits, limit=config.max_passages, max_chars=config.max_passage_chars),
        history=history,
        question=query.text,
        request_system=query.instructions.strip(),
    )


class Renderer(Protocol):
    """Turns chat messages into the exact text and tokens the model sees (the GGUF chat template).

    A renderer may also have `count(text)` and `ids(text)` (token counts and ids remembered by text), and
    `splits_on_whitespace = True` when no token of its tokenizer spans whitespace: then a prompt's tokens are its
    lines' tokens, and fitting never tokenizes a whole prompt (without `ids`, only the prompt it returns)."""

    def render(self, messages: list[dict[str, str]]) -> str: ...

    def tokenize(self, text: str) -> list[int]: ...


class CountingRenderer:
    """A model-free layout (role headers, as WordRenderer) tokenized by a real tokenizer, a
    `ragopt.tokencount.TokenCounter`: what a sweep without an LLM counts context tokens with."""

    def __init__(self, counter: TokenCounter):
        self.tokenize = counter.tokenize
        self.ids = counter.ids
        self.count = counter.count
        self.splits_on_whitespace = counter.splits_on_whitespace
        self.identity = counter.fingerprint

    def render(self, messages: list[dict[str, str]]) -> str:
        return WordRenderer().render(messages)


class WordRenderer:
    """A model-free renderer for tests and estimates: role headers, one token per whitespace-separated word."""

    splits_on_whitespace = True

    def render(self, messages: list[dict[str, str]]) -> str:
        return "".join(f"<{m['role']}>\n{m['content']}\n" for m in messages) + "<assistant>\n"

    def tokenize(self, text: str) -> list[int]:
        return [hash(w) & 0x7FFFFFFF for w in text.split()]


@dataclass
class FittedPrompt:
    messages: list[dict[str, str]]
    text: str
    tokens: Sequence[int]  # an array("I") where the counter joins its lines' ids
    parts: PromptParts
    budget_tokens: int
    dropped_passages: list[str] = field(default_factory=list)  # chunk ids, lowest-ranked first removed
    trimmed_history_turns: int = 0  # dropped by the token budget, a dropped summary included (config's max_history_turns is applied before)
    summary_truncated: bool = False  # the summary turn was cut or dropped by the token budget
    question_truncated: bool = False
    stable_prefix_tokens: int = 0  # tokens up to the end of the plan's system text (public + tenant; not the request's)
    public_prefix_tokens: int = 0  # tokens that hold no tenant data (shareable across tenants)

    @property
    def passages(self) -> list[Passage]:
        return self.parts.passages

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def fingerprint(self) -> str:
        """What identifies a fitted prompt in a trace or a sweep's outcome: its text's sha256 (first 16 hex)."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


Cut = tuple[int, int, int, "str | None"]  # passages, verbatim turns dropped, summary words, question (None: whole)


class _Candidates:
    """The prompts `parts` can give up content into: the first n passages, the verbatim turns after the first
    n_drop, the summary's first n words, the question (or a head of it). Each is rendered once, estimated from
    its lines' counts, and tokenized only when an exact check needs it."""

    def __init__(self, parts: PromptParts, renderer: Renderer, budget_tokens: int):
        self.parts, self.renderer, self.budget = parts, renderer, budget_tokens
        self.lines = LineCounts(renderer)
        self.passages = list(parts.passages)
        self.summary = parts.history[0] if parts.history and parts.history[0].role == "system" else None
        self.verbatim = list(parts.history[1:] if self.summary is not None else parts.history)
        self.summary_words = self.summary.content.split() if self.summary is not None else []
        self._rendered: dict[Cut, tuple[PromptParts, str]] = {}
        self._tokens: dict[Cut, Sequence[int]] = {}

    def render(self, n_pass: int, n_drop: int, n_summary_words: int, question: str | None = None) -> tuple[PromptParts, str]:
        cut = (n_pass, n_drop, n_summary_words, question)
        if cut not in self._rendered:
            words = self.summary_words[:n_summary_words]
            kept_summary = [Turn(role="system", content=" ".join(words))] if n_summary_words else []
            p = replace(self.parts, passages=self.passages[:n_pass], history=kept_summary + self.verbatim[n_drop:],
                        question=self.parts.question if question is None else question)  # the system parts stay whole
            self._rendered[cut] = (p, self.renderer.render(p.messages()))
        return self._rendered[cut]

    def tokens(self, n_pass: int, n_drop: int, n_summary_words: int, question: str | None = None) -> Sequence[int]:
        cut = (n_pass, n_drop, n_summary_words, question)
        if cut not in self._tokens:  # the search checks the prompt it then returns: tokenized once
            self._tokens[cut] = self.lines.tokens(self.render(*cut)[1])
        return self._tokens[cut]

    def estimate_fits(self, *cut: Any) -> bool:
        return self.lines.estimate(self.render(*cut)[1]) <= self.budget

    def fits(self, *cut: Any) -> bool:
        return len(self.tokens(*cut)) <= self.budget

    def estimate_is_exact(self, cut: Cut) -> bool:
        """The one tokenization of a prompt fitted from counts: it holds as many tokens as its lines add up to."""
        return self.lines.exact and len(self.tokens(*cut)) == self.lines.estimate(self.render(*cut)[1])

    def cut(self, fits: Callable[..., bool], guess: Cut | None = None) -> Cut | None:
        """The largest prompt for which `fits` holds, giving up content in the order of the module docstring; None
        when not even the system text and an empty question fit. The searches start from `guess` when given."""
        verbatim = self.verbatim
        n_pass, n_drop, n_words, question = len(self.passages), 0, len(self.summary_words), None
        g_pass, g_drop, g_words, g_question = guess if guess is not None else (None, None, None, None)
        one = min(n_pass, 1)
        k = largest(one, n_pass, lambda k: fits(k, 0, n_words), start=g_pass)  # 1. passages: all, else 1
        if k is not None:
            return k, n_drop, n_words, question
        keep_guess = None if g_drop is None else len(verbatim) - g_drop
        keep = largest(0, len(verbatim), lambda keep: fits(one, len(verbatim) - keep, n_words), start=keep_guess)  # 2. turns, oldest first
        n_drop = len(verbatim) - (keep or 0)
        if keep is not None:
            return one, n_drop, n_words, question
        w = largest(0, n_words, lambda w: fits(one, n_drop, w), start=g_words)  # 3. the summary, from its end
        if w is not None:
            return one, n_drop, w, question
        if fits(0, n_drop, 0):  # 4. the last passage
            return 0, n_drop, 0, question
        q = self.parts.question  # 5. the question's tail
        n_chars = largest(0, len(q), lambda n: fits(0, n_drop, 0, q[:n]), start=None if g_question is None else len(g_question))
        return None if n_chars is None else (0, n_drop, 0, q[:n_chars])

    def head_tokens(self, text: str, tokens: Sequence[int], end_char: int) -> int:
        """How many of the prompt's `tokens` encode exactly `text[:end_char]`: from the lines' counts when the
        tokenizer splits on whitespace and whitespace follows, else by tokenizing the head."""
        if self.lines.exact and (end_char >= len(text) or text[end_char].isspace()):
            return min(self.lines.estimate(text[:end_char]), len(tokens))
        return prefix_tokens(text, tokens, end_char, self.renderer.tokenize)


def fit_prompt(parts: PromptParts, renderer: Renderer, budget_tokens: int) -> FittedPrompt:
    """The largest prompt within `budget_tokens`, giving up content in the order of the module docstring.

    The cut is found from the prompt lines' token counts. When the tokenizer splits on whitespace the counts add
    up exactly and the prompt's tokens are its lines' tokens joined; otherwise (a merge across a line break can
    shorten or lengthen a prompt) the prompt is tokenized whole and exact checks search on from the estimate."""
    if budget_tokens <= 0:
        raise InputError(f"no room for a prompt: the token budget is {budget_tokens} (context minus max_tokens)")
    candidates = _Candidates(parts, renderer, budget_tokens)
    whole: Cut = (len(candidates.passages), 0, len(candidates.summary_words), None)  # most prompts keep it all: one check
    found = guess = whole if candidates.estimate_fits(*whole) else candidates.cut(candidates.estimate_fits)
    if guess is None or not candidates.estimate_is_exact(guess):
        found = candidates.cut(candidates.fits, guess)
    if found is None:
        if parts.request_system:
            plan_only = _Candidates(replace(parts, request_system=""), renderer, budget_tokens)
            if plan_only.cut(plan_only.fits) is not None:
                raise BadRequest("messages", f"the system and developer messages do not fit the prompt's token budget "
                                             f"({budget_tokens} tokens) beside the plan's own instructions: shorten them")
        raise InputError(
            f"the system prompt and instructions alone exceed the token budget ({budget_tokens} tokens); "
            "raise n_ctx, lower max_tokens or shorten the instructions"
        )
    n_pass, n_drop, n_words, question = found
    p, text = candidates.render(*found)
    tokens = candidates.tokens(*found)
    summary = candidates.summary
    system_at = text.find(p.system)
    stable = public = 0
    if system_at >= 0:
        stable = candidates.head_tokens(text, tokens, system_at + len(p.plan_system))
        public = candidates.head_tokens(text, tokens, system_at + len(p.public_system))
    return FittedPrompt(
        messages=p.messages(),
        text=text,
        tokens=tokens,
        parts=p,
        budget_tokens=budget_tokens,
        dropped_passages=[x.chunk_id for x in candidates.passages[n_pass:]],
        trimmed_history_turns=n_drop + int(summary is not None and n_words == 0),
        summary_truncated=summary is not None and n_words < len(candidates.summary_words),
        question_truncated=question is not None,
        stable_prefix_tokens=stable,
        public_prefix_tokens=min(public, stable) if p.tenant_system else stable,
    )


class BuildPrompt:
    """The prompt stage: lays out and fits the prompt, between retrieval (or compression) and generation.

    `BuildPrompt(renderer, budget_tokens, PromptConfig())` writes a `FittedPrompt` to `state.prompt`; a
    generator's `prompt_stage()` builds the one matching its model (template, tokenizer, n_ctx - max_tokens).
    The trace shows what the budget did: prompt tokens, dropped passages, trimmed turns, a cut question."""

    reads = ("query", "hits")
    writes = ("prompt",)

    def __init__(self, renderer: Renderer, budget_tokens: int, config: PromptConfig | None = None, name: str = "prompt"):
        if budget_tokens <= 0:
            raise InputError(f"no room for a prompt: the token budget is {budget_tokens} (context minus max_tokens)")
        self.renderer = renderer
        self.budget_tokens = budget_tokens
        self.config = config if config is not None else PromptConfig()
        self.name = name

    def identity(self) -> dict[str, object]:
        """What decides the fitted prompt besides the request: layout, budget and the renderer's tokenizer."""
        renderer = getattr(self.renderer, "identity", None)
        return {"stage": "prompt", "config": self.config.model_dump(mode="json"), "budget": self.budget_tokens,
                "renderer": renderer() if callable(renderer) else renderer or type(self.renderer).__name__}

    def run(self, state: RequestState) -> RequestState:
        fitted = fit_prompt(prompt_parts(state.query, state.hits, self.config), self.renderer, self.budget_tokens)
        state.prompt = fitted
        state.usage.attrs.update(
            {
                "prompt_tokens": fitted.n_tokens,
                "dropped_passages": fitted.dropped_passages,
                "trimmed_history_turns": fitted.trimmed_history_turns,
                "question_truncated": fitted.question_truncated,
                "stable_prefix_tokens": fitted.stable_prefix_tokens,
                "passages": [p.chunk_id for p in fitted.passages],
            }
        )
        if fitted.parts.request_system:  # the request's instructions, as the prompt's system part holds them
            state.usage.attrs.update({"instructions": fitted.parts.request_system,
                                      "instructions_tokens": len(self.renderer.tokenize(fitted.parts.request_system))})
        return state
