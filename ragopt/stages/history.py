"""History summarization: the last N turns verbatim, older turns condensed into one summary turn.

The summary is a `Turn(role="system")` whose content starts with `SUMMARY_HEADER`, one item per line:

    Goal: ...            what the user is trying to do (a goal sentence, else their first question)
    Constraint: ...      constraints and permissions the user or the system stated
    Open task: ...       what the user asked to do later
    Note: ...            (mode llm) what the LLM wrote
    Fact: ...            confirmed facts: cited answers ([n]) and statements the user confirmed

Extractive by default: sentences of the older turns are classified by cue words, then items are admitted in
priority order (constraints, oldest first; the goal; open tasks and facts, newest first) while the summary stays
within `summary_tokens` (counted with the callable the stage is given; default: whitespace words, each Han
character one). Sentences end at English and Chinese sentence ends (`ragopt.text.sentence_spans`). In mode "llm"
the constraints are still extracted (so they are never lost to a paraphrase) and the LLM's notes fill the rest.

Long-lived: a history that already starts with a summary turn is summarized again with the old items first, so
a constraint stated in turn 1 survives any number of re-summarizations while the budget holds it.
Redaction: each `redact` entry is a field name ("patient_id" also matches "patient id", "Patient-ID"; the value
after it is replaced) or a regular expression (every match is replaced). Redacted values become [REDACTED] in
the summary, including in text the LLM writes; the verbatim recent turns are left as the user wrote them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

from pydantic import Field, field_validator

from ragopt.config import StrictModel, knob
from ragopt.errors import ContextOverflow, QueueTimeout
from ragopt.pipeline import RequestState
from ragopt.resources import Resources
from ragopt.stages.generate_llama import GeneratorConfig, get_engine
from ragopt.stages.spec import BuildContext, Plan, StageSpec
from ragopt.text import sentences, word_spans
from ragopt.types import Turn

SUMMARY_HEADER = "Summary of the earlier conversation:"
REDACTED = "[REDACTED]"
# rendered in this order, so a prompt budget that cuts the summary from its end takes the least important first
LABELS = {"goal": "Goal", "constraint": "Constraint", "task": "Open task", "note": "Note", "fact": "Fact"}

_CONSTRAINT = re.compile(
    r"\b(must|never|always|only|do not|don't|cannot|can't|should not|shouldn't|not allowed|allowed|permission|"
    r"permitted|access|authori[sz]ed|restricted|confidential|at most|at least|no more than|no later than|deadline|"
    r"without|avoid|exclude|excluding|limit(?:ed)?|required?)\b", re.IGNORECASE)
_GOAL = re.compile(
    r"\b(i want|i need|i'd like|i would like|my goal|our goal|we want|we need|i am trying|i'm trying|we are trying|"
    r"we're trying|help me|looking for|i am working on|i'm working on|we are building|we're building|i plan|we plan)\b",
    re.IGNORECASE)
_TASK = re.compile(
    r"\b(remind|later|next time|todo|to do|still need|follow up|follow-up|pending|don't forget|do not forget|"
    r"tomorrow|afterwards)\b", re.IGNORECASE)
_CONFIRMED = re.compile(r"^(yes|correct|confirmed|right|exactly|that's right|that is right)\b|\bconfirm(?:ed)?\b", re.IGNORECASE)
_CITED = re.compile(r"\[\d+\]")

LLM_SYSTEM = (
    "Summarize the earlier conversation for an assistant that will continue it. Keep the user's goal, facts that "
    "were confirmed, constraints and permissions, and open tasks. Write a few short lines, no preamble."
)


def whitespace_tokens(text: str) -> int:
    """Words as whitespace separates them, each Han character one (Chinese puts no spaces between words)."""
    return len(word_spans(text))


class HistoryConfig(StrictModel):
    keep_turns: int = knob(4, sweep=[2, 4, 8], ge=0, description="most recent turns kept verbatim")
    summary_tokens: int = knob(128, sweep=[64, 128, 256], gt=0, description="token budget of the summary turn")
    mode: Literal["extractive", "llm"] = knob("extractive", sweep=["extractive", "llm"],
                                              description="how older turns are condensed")
    redact: tuple[str, ...] = Field((), description="sensitive field names (their values are redacted) or regular expressions")
    llm: GeneratorConfig = Field(GeneratorConfig(n_ctx=1536, max_tokens=160),
                                 description="the model for mode llm (an engine apart from the generator's by default)")
    llm_turns: int = Field(12, ge=1, description="most recent older turns shown to the LLM")

    @field_validator("redact")
    @classmethod
    def _compiles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            redaction_pattern(item)  # raises ValueError (an InputError through config validation)
        return value


def redaction_pattern(item: str) -> tuple[re.Pattern[str], str]:
    """(pattern, replacement) for one `redact` entry: a field name keeps its name and hides its value."""
    item = item.strip()
    if not item:
        raise ValueError("an empty redact entry")
    if re.fullmatch(r"[A-Za-z][\w\- ]*", item):
        name = r"[\s_\-]*".join(re.escape(w) for w in re.split(r"[_\-\s]+", item) if w)
        value = rf"(?!{re.escape(REDACTED)})[^\s,;]*[^\s,;.!?)\]]"  # a value redacted before stays as it is
        return re.compile(rf"\b({name})\b(\s*(?:[:=#]|\bis\b|\bwas\b|\bof\b)?\s*){value}", re.IGNORECASE), rf"\1\2{REDACTED}"
    try:
        return re.compile(item), REDACTED
    except re.error as exc:
        raise ValueError(f"redact entry {item!r} is not a valid regular expression: {exc}") from None


@dataclass
class Summary:
    """Items by kind, in the order they were said; `render` fits them into a token budget."""

    items: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in LABELS})

    def add(self, kind: str, text: str) -> None:
        text = " ".join(text.split())
        key = _key(text)
        if text and all(_key(t) != key for ts in self.items.values() for t in ts):
            self.items[kind].append(text)

    def render(self, budget: int, count: Callable[[str], int]) -> tuple[str, int]:
        """The summary text within `budget` tokens, and how many items did not fit."""
        priority = ([("constraint", t) for t in self.items["constraint"]] + [("goal", t) for t in self.items["goal"][:1]]
                    + [("task", t) for t in reversed(self.items["task"])] + [("note", t) for t in self.items["note"]]
                    + [("fact", t) for t in reversed(self.items["fact"])] + [("goal", t) for t in self.items["goal"][1:]])
        order = {k: i for i, k in enumerate(LABELS)}
        chosen: list[tuple[str, str]] = []

        def text_with(extra: list[tuple[str, str]]) -> str:
            lines = sorted(chosen + extra, key=lambda kl: order[kl[0]])  # stable: priority order within a kind
            return "\n".join([SUMMARY_HEADER] + [line for _, line in lines])

        for kind, item in priority:
            line = f"{LABELS[kind]}: {item}"
            if count(text_with([(kind, line)])) > budget:
                if chosen:
                    continue
                # one item longer than the whole budget: its head
                line = _cut_words(line, lambda head: count(text_with([(kind, head)])) <= budget)
                if not line:
                    break
            chosen.append((kind, line))
        return text_with([]), len(priority) - len(chosen)


def _key(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def _cut_words(text: str, fits: Callable[[str], bool]) -> str:
    """The longest prefix of `text` ending at a word (each Han character a word) that fits ("" if none)."""
    ends = [e for _, e in word_spans(text)]
    lo, hi = 0, len(ends)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(text[: ends[mid - 1]]):
            lo = mid
        else:
            hi = mid - 1
    return text[: ends[lo - 1]] if lo else ""


def is_summary(turn: Turn) -> bool:
    return turn.role == "system" and turn.content.startswith(SUMMARY_HEADER)


def parse_summary(text: str) -> Summary:
    """The items of a summary this module wrote (unknown lines become notes)."""
    by_label = {v: k for k, v in LABELS.items()}
    summary = Summary()
    for line in text.splitlines()[1:]:
        label, sep, rest = line.partition(": ")
        summary.add(by_label.get(label, "note") if sep else "note", rest if sep and label in by_label else line)
    return summary


def extract(turns: Sequence[Turn], summary: Summary) -> Summary:
    """Classify the sentences of `turns` (oldest first) into `summary`'s kinds by cue words."""
    first_question = None
    for turn in turns:
        for s in sentences(turn.content):
            if turn.role == "assistant":
                if _CITED.search(s):
                    summary.add("fact", s)
                continue
            if _CONSTRAINT.search(s):
                summary.add("constraint", s)
            elif turn.role == "user" and _GOAL.search(s):
                summary.add("goal", s)
            elif turn.role == "user" and _TASK.search(s):
                summary.add("task", s)
            elif turn.role == "user" and _CONFIRMED.search(s):
                summary.add("fact", s)
            elif turn.role == "user" and first_question is None and s.endswith("?"):
                first_question = s
    if not summary.items["goal"] and first_question is not None:
        summary.add("goal", first_question)
    return summary


class SummarizeHistory:
    """Pipeline stage: `query.history` becomes [summary turn] + the last `keep_turns` turns (see module docstring)."""

    reads = ("query",)
    writes = ("query",)

    def __init__(self, config: HistoryConfig | None = None, count_tokens: Callable[[str], int] | None = None,
                 name: str = "history", resources: Resources | None = None):
        self.config = config or HistoryConfig()
        self.count = count_tokens or whitespace_tokens
        self.name = name
        self.resources = resources if resources is not None else Resources()  # the LLM, in llm mode
        self.patterns = [redaction_pattern(r) for r in self.config.redact]
        if self.config.mode == "llm":
            from ragopt.gguf_meta import resolve_model

            resolve_model(self.config.llm.model)  # a missing model fails before any request

    def redact(self, text: str) -> tuple[str, int]:
        total = 0
        for pattern, replacement in self.patterns:
            text, n = pattern.subn(replacement, text)
            total += n
        return text, total

    def run(self, state: RequestState) -> RequestState:
        cfg = self.config
        history = list(state.query.history)
        keep = max(len(history) - cfg.keep_turns, 0)
        older, recent = history[:keep], history[keep:]
        attrs = state.usage.attrs
        attrs.update({"history_turns_in": len(history), "summarized_turns": 0})
        if not older or (len(older) == 1 and is_summary(older[0])):
            return state  # nothing new to condense
        summary = Summary()
        plain = []
        for turn in older:
            if is_summary(turn):
                for kind, texts in parse_summary(turn.content).items.items():
                    for t in texts:
                        summary.add(kind, t)
            else:
                plain.append(turn)
        redactions = 0
        redacted = []
        for turn in plain:
            text, n = self.redact(turn.content)
            redactions += n
            redacted.append(Turn(role=turn.role, content=text))
        extract(redacted, summary)
        if cfg.mode == "llm":
            self._llm_notes(state, redacted, summary)
        text, left_out = summary.render(cfg.summary_tokens, self.count)
        text, n = self.redact(text)  # the LLM may have written a value back
        redactions += n
        state.query = state.query.model_copy(update={"history": [Turn(role="system", content=text), *recent]})
        attrs.update({"summarized_turns": len(plain), "kept_turns": len(recent), "summary_tokens": self.count(text),
                      "summary_items_left_out": left_out, "redactions": redactions})
        return state

    def _llm_notes(self, state: RequestState, turns: list[Turn], summary: Summary) -> None:
        from ragopt.stages.llm_text import complete, prompt_tokens

        cfg = self.config
        known = "\n".join(f"{LABELS[k]}: {t}" for k, ts in summary.items.items() for t in ts if k != "fact")
        max_tokens = min(cfg.llm.max_tokens, 2 * cfg.summary_tokens)
        q = state.query

        def prompt(n_turns: int) -> str:
            shown = "\n".join(f"{t.role.capitalize()}: {' '.join(t.content.split())[:300]}" for t in turns[len(turns) - n_turns :])
            return f"Already noted:\n{known or '(nothing)'}\n\nConversation:\n{shown}\n\nSummary:"

        try:
            engine = get_engine(cfg.llm, self.resources)
            n = min(cfg.llm_turns, len(turns))
            while n > 1 and prompt_tokens(engine, LLM_SYSTEM, prompt(n)) + max_tokens > engine.n_ctx:
                n -= 1  # the newest older turns that fit the context
            done = complete(engine, LLM_SYSTEM, prompt(n), (q.tenant, tuple(q.scopes)),
                            max_tokens=max_tokens, stop=(), timeout_s=state.remaining_s())
        except (QueueTimeout, ContextOverflow) as exc:  # busy model or an oversized prompt: the extractive summary stands
            state.usage.attrs["llm_rejected"] = f"{type(exc).__name__}: {exc}"
            return
        for line in done.text.splitlines():
            line = line.strip().lstrip("-*• ").strip()
            if line:
                summary.add("note", line)
        state.usage.tokens_in += done.tokens_in
        state.usage.tokens_out += done.tokens_out


def _build(config: HistoryConfig, ctx: BuildContext) -> SummarizeHistory:
    return SummarizeHistory(config, resources=ctx.resources)


def _check(config: HistoryConfig, plan: Plan) -> None:
    SummarizeHistory(config)  # compiles the redaction patterns, finds the model in llm mode


SPEC = StageSpec("history", HistoryConfig, _build, slot="history", check=_check,
                 models=lambda config: {"history": config.llm.model_file()} if config.mode == "llm" else {})
