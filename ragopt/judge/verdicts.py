"""What a judge is asked: one yes/no question per verdict, laid out so llama.cpp reuses the shared prefix.

Every prompt starts with the passages and the question, and only then names what is judged (an answer
sentence, the reference answer, or nothing for context relevance), so the verdicts about one answer share
their longest part: llama.cpp (in process and llama-server's `cache_prompt`) evaluates it once.

A verdict's output is one label, "yes" or "no": forced by a GBNF grammar in process, by a JSON schema
over HTTP where the server offers structured output, else read from the first word of a short answer.
Anything else is unreadable (`supported` None): counted as a judge failure, never scored as a number.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

# bump when a prompt or label changes: it is part of every verdict's cache key
PROMPT_VERSION = "judge-v1"
LABELS = ("yes", "no")

Kind = Literal["claim", "correctness", "context"]

SYSTEM = ("You are a careful fact checker. You read passages and answer one question about them "
          "with a single word: yes or no.")

_ASK = {
    "claim": "Statement: {target}\n\nIs all of the statement supported by the passages? yes or no.",
    "correctness": ("Reference answer: {reference}\n\nAnswer: {target}\n\n"
                    "Does the answer say the same as the reference answer? Answer yes or no."),
    "context": "Do the passages contain the information needed to answer the question? Answer yes or no.",
}

# the JSON schema a structured-output server constrains the verdict to
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": list(LABELS)}},
    "required": ["verdict"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class VerdictRequest:
    """One question to a judge. `target` is the answer sentence (claim) or the answer (correctness)."""

    kind: Kind
    question: str
    passages: tuple[str, ...]
    target: str = ""
    reference: str | None = None

    def payload(self) -> list[Any]:
        """Everything that decides the verdict besides the judge and the prompt version (for cache keys)."""
        return [self.kind, self.question, list(self.passages), self.target, self.reference]


@dataclass
class Verdict:
    supported: bool | None  # None: the judge's output could not be read
    raw: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    cached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def user_message(request: VerdictRequest) -> str:
    """Passages and question first (the prefix shared by the verdicts of one answer), the judged text last."""
    passages = "\n\n".join(f"[{i}] {' '.join(p.split())}" for i, p in enumerate(request.passages, start=1))
    ask = _ASK[request.kind].format(target=request.target, reference=request.reference or "")
    return f"Passages:\n{passages}\n\nQuestion: {request.question}\n\n{ask}"


def messages(request: VerdictRequest) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user_message(request)}]


_LABEL = re.compile(r"[\W_]*(yes|no)\b", re.IGNORECASE)  # the label first, after quotes or the like


def read_label(text: str) -> bool | None:
    """yes -> True, no -> False, from a bare label, a JSON verdict or a text that starts with one; else None
    (unreadable)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        text = str(value.get("verdict", "")) if isinstance(value, dict) else ""
    m = _LABEL.match(text)
    return None if m is None else m.group(1).lower() == "yes"


def answer_requests(question: str, passages: Sequence[str], sentences: Sequence[str], answer: str,
                    reference: str | None, kinds: Sequence[Kind]) -> list[VerdictRequest]:
    """The verdicts one answer needs, in prefix-sharing order: its sentences, then correctness, then context."""
    shared = dict(question=question, passages=tuple(passages))
    out: list[VerdictRequest] = []
    if "claim" in kinds:
        out += [VerdictRequest("claim", target=s, **shared) for s in sentences]  # type: ignore[arg-type]
    if "correctness" in kinds and reference:
        out.append(VerdictRequest("correctness", target=answer, reference=reference, **shared))  # type: ignore[arg-type]
    if "context" in kinds:
        out.append(VerdictRequest("context", **shared))  # type: ignore[arg-type]
    return out
