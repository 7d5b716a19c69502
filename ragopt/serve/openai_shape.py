"""OpenAI's chat request and response shapes for `ragopt serve` (`/v1/chat/completions`, `/v1/models`).

A request becomes what the pipeline takes: the last message (a user's) is the question; the earlier user and
assistant turns are its history, which the plan's rewrite and history stages read as the sweep's follow-up
questions carry theirs; system (and developer) messages are the conversation's instructions
(`Query.instructions`): the prompt's system part after the plan's own, never summarized nor trimmed (a budget
they do not fit is a 400 naming `messages`). A message's content is a string or an array of parts: text parts are joined, any other
part is refused naming it. `max_tokens` / `max_completion_tokens`, `temperature`, `stop`, `seed`, `top_p`,
`frequency_penalty`, `presence_penalty` and `logit_bias` reach the generator within the plan's settings
(`ragopt.types.Sampling`; a generator that cannot honour one refuses it, naming it); what ragopt cannot honour
at all (`n` > 1, tools, a response format other than text, log probabilities) is refused naming the field, never
ignored.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragopt.types import Sampling, Turn
from ragopt.errors import BadRequest


class TextPart(BaseModel):
    type: str
    text: str | None = None

    model_config = ConfigDict(extra="allow")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_call_id ...: nothing that changes a text turn

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None


class ChatBody(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI clients send options that do not change an answer (user, metadata...)

    messages: list[ChatMessage] = Field(min_length=1)
    model: str = "ragopt"
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None
    max_tokens: int | None = Field(None, gt=0)
    max_completion_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0, le=2)
    stop: str | list[str] | None = None
    seed: int | None = None
    top_p: float | None = Field(None, ge=0, le=1)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[Annotated[int, Field(ge=0)], Annotated[float, Field(ge=-100, le=100)]] | None = None  # token id -> bias
    n: int | None = Field(None, ge=1)


# fields a request may send only at the value that asks for nothing ragopt does not do
_UNSUPPORTED = {
    "tools": "tools are not supported: ragopt answers from its passages",
    "tool_choice": "tools are not supported: ragopt answers from its passages",
    "functions": "functions are not supported: ragopt answers from its passages",
    "function_call": "functions are not supported: ragopt answers from its passages",
    "logprobs": "log probabilities are not returned",
    "top_logprobs": "log probabilities are not returned",
}
_HARMLESS = (None, False, [], {}, "none", "auto", 0)


@dataclass
class ChatRequest:
    question: str
    history: list[Turn]
    sampling: Sampling | None
    include_usage: bool
    instructions: str = ""  # the system and developer messages, in order


def _text(message: ChatMessage, i: int) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if part.type != "text" or part.text is None:
            raise BadRequest(f"messages.{i}.content.{j}", f"a part of type {part.type!r} is not supported; only text parts",
                             "unsupported_value")
        texts.append(part.text)
    return "\n".join(texts)


def _refuse_unsupported(body: ChatBody) -> None:
    if body.n is not None and body.n > 1:
        raise BadRequest("n", f"{body.n} choices asked; ragopt answers with one (n=1)", "unsupported_value")
    extra = body.model_extra or {}
    for name, why in _UNSUPPORTED.items():
        if extra.get(name) not in _HARMLESS:
            raise BadRequest(name, why, "unsupported_parameter")
    fmt = extra.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise BadRequest("response_format", "only text answers (type \"text\"); JSON and schemas are not supported",
                         "unsupported_value")


def chat_request(body: ChatBody) -> ChatRequest:
    """The question, its history and its sampling options; BadRequest names what ragopt cannot honour."""
    _refuse_unsupported(body)
    last = len(body.messages) - 1
    if body.messages[last].role != "user":
        raise BadRequest(f"messages.{last}.role", "the last message must be the user's question")
    instructions: list[str] = []
    history: list[Turn] = []
    for i, message in enumerate(body.messages[:last]):
        text = _text(message, i).strip()
        if message.role in ("tool", "function"):
            raise BadRequest(f"messages.{i}.role", f"{message.role!r} messages are not supported: ragopt calls no tools")
        if not text:
            continue
        if message.role in ("system", "developer"):
            instructions.append(text)
        else:
            history.append(Turn(role=message.role, content=text))
    question = _text(body.messages[last], last).strip()
    if not question:
        raise BadRequest(f"messages.{last}.content", "the question is empty")
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    max_tokens = min((v for v in (body.max_tokens, body.max_completion_tokens) if v is not None), default=None)
    values = {"max_tokens": max_tokens, "temperature": body.temperature, "stop": stop, "seed": body.seed, "top_p": body.top_p,
              "frequency_penalty": body.frequency_penalty, "presence_penalty": body.presence_penalty,
              "logit_bias": tuple((body.logit_bias or {}).items())}
    sampling = Sampling(**values) if any(v not in (None, ()) for v in values.values()) else None
    include_usage = bool((body.stream_options or {}).get("include_usage"))
    return ChatRequest(question, history, sampling, include_usage, "\n\n".join(instructions))


def _event(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()


class ChatRender:
    """OpenAI chat.completion(.chunk) bodies around an answer. With stream_options.include_usage the stream ends
    with a chunk of no choices that carries the usage, as OpenAI's does."""

    def __init__(self, model: str, include_usage: bool = False):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        self.model = model
        self.created = int(time.time())
        self.include_usage = include_usage

    def _body(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": choices}

    def token(self, piece: str) -> bytes:
        return _event(self._body([{"index": 0, "delta": {"content": piece}, "finish_reason": None}]))

    @staticmethod
    def _finish(out: dict[str, Any]) -> str:
        return "length" if out["trace"].get("finish_reason") in ("length", "deadline") else "stop"

    @staticmethod
    def _usage(out: dict[str, Any]) -> dict[str, int]:
        t = out["trace"]
        return {"prompt_tokens": t["tokens_in"], "completion_tokens": t["tokens_out"], "total_tokens": t["tokens_in"] + t["tokens_out"]}

    def done(self, out: dict[str, Any]) -> list[bytes]:
        extra = {"ragopt": {"citations": out["citations"], "trace": out["trace"]}}
        last = self._body([{"index": 0, "delta": {}, "finish_reason": self._finish(out)}])
        if not self.include_usage:
            return [_event({**last, "usage": self._usage(out), **extra}), b"data: [DONE]\n\n"]
        return [_event({**last, **extra}), _event({**self._body([]), "usage": self._usage(out)}), b"data: [DONE]\n\n"]

    def whole(self, out: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": out["answer"]},
                             "finish_reason": self._finish(out)}],
                "usage": self._usage(out), "ragopt": {"citations": out["citations"], "trace": out["trace"]}}


def models_list(names: list[str], created: int) -> dict[str, Any]:
    """`/v1/models`: what `model` may name (every name is answered by the served plan)."""
    return {"object": "list", "data": [{"id": n, "object": "model", "created": created, "owned_by": "ragopt"} for n in names]}
