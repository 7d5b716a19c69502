"""Generation through an OpenAI-compatible HTTP server, streamed: llama.cpp's `llama-server` locally
(continuous batching over `--parallel` slots, prompt cache), vLLM or any compatible server at scale.

    gen = HttpGenerator(HttpGeneratorConfig(base_url="http://127.0.0.1:8080"))
    Pipeline([...retrieval..., gen.prompt_stage(), gen])

The prompt stage fits the prompt with the server's own chat template and tokenizer (llama-server's
`/apply-template` and `/tokenize`; a server without them gets a conservative 3-characters-per-token
estimate). This stage sends `state.prompt.messages` to `/v1/chat/completions` with `stream: true`, passes
each streamed piece to `state.on_token`, and stops reading - which closes the connection, and llama-server
then frees the slot - when the request's deadline passes (the service sets the deadline to "now" when a
client disconnects), so cancelling takes at most one decode step.

Measurements, with the in-process backend's definitions: `ttft_ms` wall-clock from the request's arrival
(`RequestState.arrival` where the pipeline sets it, else the start of this stage) to the first streamed
token; `prefill_ms` the server's own prompt-evaluation time (`timings.prompt_ms`); `queue_ms` the rest of
the wait for the first token (slot wait + transport: first token - send - prefill); `tpot_ms` wall-clock
between the first and last token over (tokens - 1); `reused_tokens` the prompt tokens the server took from
its cache (`timings.cache_n`). A server without `timings` leaves prefill and reuse unknown (None).
"""

from __future__ import annotations

import collections
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from pydantic import Field

from ragopt.errors import BackendError, InputError
from ragopt.pipeline import RequestState
from ragopt.resources import Resources
from ragopt.stages.citations import invalid_markers, parse_citations
from ragopt.stages.completion import CompletionConfig
from ragopt.stages.prompt import FittedPrompt
from ragopt.trace import Usage
from ragopt.types import Answer, Citation, Sampling


class HttpGeneratorConfig(CompletionConfig):
    """A server's address and timeouts; the completion settings are the ones every LLM generator shares."""

    base_url: str = Field(..., description="the server's root, e.g. http://127.0.0.1:8080 (no /v1)")
    model_name: str = Field("default", description="the model name sent in the request (llama-server ignores it)")
    api_key: str | None = Field(None, description="sent as a Bearer token when set")
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(120.0, gt=0, description="longest silence between streamed pieces")


class ServerRenderer:
    """Renders and tokenizes with the server's own template and vocabulary (llama-server endpoints);
    falls back to an estimate of one token per 3 characters on a server without them."""

    def __init__(self, client: Any, headers: dict[str, str], memo_entries: int = 256):
        self.client = client
        self.headers = headers
        self.exact: bool | None = None  # None until the first call tells
        # fitting tokenizes the same system-prompt prefixes for every request: remember recent texts
        self._memo: collections.OrderedDict[str, list[int]] = collections.OrderedDict()
        self._memo_entries = memo_entries
        self._lock = threading.Lock()

    def render(self, messages: list[dict[str, str]]) -> str:
        if self.exact is not False:
            r = self.client.post("/apply-template", json={"messages": messages}, headers=self.headers)
            if r.status_code == 200 and "prompt" in r.json():
                self.exact = True
                return str(r.json()["prompt"])
            self.exact = False
        return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"

    def tokenize(self, text: str) -> list[int]:
        if self.exact:
            with self._lock:
                if text in self._memo:
                    self._memo.move_to_end(text)
                    return self._memo[text]
            r = self.client.post("/tokenize", json={"content": text, "add_special": True, "parse_special": True}, headers=self.headers)
            if r.status_code == 200:
                tokens = [int(t) for t in r.json()["tokens"]]
                with self._lock:
                    self._memo[text] = tokens
                    while len(self._memo) > self._memo_entries:
                        self._memo.popitem(last=False)
                return tokens
        # an estimate (never exact ids): 1 token per 3 characters over-counts English text, so a prompt fits
        return list(range((len(text) + 2) // 3))


def _sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON payloads of a server-sent-event stream; a stream that ends before `data: [DONE]` broke."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except json.JSONDecodeError as exc:
            raise BackendError(f"malformed stream event: {data[:80]!r}") from exc
        if "error" in event:
            raise BackendError(f"server error mid-stream: {str(event['error'])[:200]}")
        yield event
    raise BackendError("the stream ended before the server finished the answer")


@dataclass
class _Streamed:
    """What reading one streamed answer gathered: the pieces, why it ended, when the first and last pieces
    came, and the server's last `timings` and `usage` (empty when it sent none)."""

    pieces: list[str] = field(default_factory=list)
    finish: str = "length"
    t_first: float | None = None
    t_last: float | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    reported: dict[str, Any] = field(default_factory=dict)


class HttpGenerator:
    """The generation stage over HTTP. Reads the fitted prompt, writes the answer."""

    reads = ("query", "prompt")
    span_kind = "LLM"  # OpenInference's word for it (ragopt.trace.Span.kind)
    writes = ("answer",)

    def __init__(self, config: HttpGeneratorConfig, name: str = "generate", resources: Resources | None = None):
        self.config = config
        self.name = name
        self.resources = resources if resources is not None else Resources()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}

    @property
    def client(self) -> Any:
        cfg = self.config

        def connect() -> Any:
            import httpx

            timeout = httpx.Timeout(cfg.read_timeout_s, connect=cfg.connect_timeout_s)
            return httpx.Client(base_url=cfg.base_url.rstrip("/"), timeout=timeout, limits=httpx.Limits(max_connections=256))

        return self.resources.get(("http-client", cfg.base_url, cfg.connect_timeout_s, cfg.read_timeout_s), connect)

    def renderer(self) -> ServerRenderer:
        return self.resources.get(("http-renderer", self.config.base_url), lambda: ServerRenderer(self.client, self.headers))

    def prompt_stage(self, name: str = "prompt") -> Any:
        """The prompt stage matching this server: its template and tokenizer, n_ctx - max_tokens tokens."""
        from ragopt.stages.prompt import BuildPrompt

        cfg = self.config
        return BuildPrompt(self.renderer(), cfg.prompt_budget, cfg.prompt, name=name)

    def request_body(self, messages: list[dict[str, str]], sampling: Sampling | None = None) -> dict[str, Any]:
        """The chat request: this config's settings with the request's own options within them (for_request), and
        the request's top_p, penalties and logit bias as it sent them."""
        cfg = self.config.for_request(sampling)
        body: dict[str, Any] = {
            "model": cfg.model_name,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
            "seed": cfg.seed,
            "cache_prompt": True,  # llama-server: reuse the slot's KV for a shared prefix
        }
        if cfg.stop:
            body["stop"] = list(cfg.stop)
        asked = sampling or Sampling()
        for name in ("top_p", "frequency_penalty", "presence_penalty"):
            if getattr(asked, name) is not None:
                body[name] = getattr(asked, name)
        if asked.logit_bias:
            body["logit_bias"] = {str(token): bias for token, bias in asked.logit_bias}  # OpenAI's form; llama-server reads it
        return body

    def check_sampling(self, sampling: Sampling | None) -> None:
        """Every sampling field goes to the server as OpenAI's API names it (llama-server, vLLM and OpenAI take
        them all); the server refuses what it cannot do (a BackendError, then the fallback)."""

    def run(self, state: RequestState) -> RequestState:
        import httpx

        fitted = state.prompt
        if fitted is None or not hasattr(fitted, "messages"):
            raise InputError("the HTTP generator needs a fitted prompt (put its prompt_stage() before it)")
        usage = state.usage
        arrival = getattr(state, "arrival", None)
        t_send = time.perf_counter()
        if arrival is None:
            arrival = t_send
        try:
            streamed = self._stream(state, fitted.messages)
        except httpx.HTTPError as exc:
            raise BackendError(f"{type(exc).__name__}: {exc}") from exc

        text = "".join(streamed.pieces)
        numbered = {p.number: p.hit.chunk for p in fitted.passages}
        citations = parse_citations(text, numbered)
        state.answer = Answer(text=text.strip(), citations=citations, incomplete=streamed.finish == "deadline",
                              finish_reason=streamed.finish, generator=f"http:{self.config.model_name}")
        _record_usage(usage, fitted, streamed, citations, t_send=t_send, arrival=arrival)
        return state

    def _stream(self, state: RequestState, messages: list[dict[str, str]]) -> _Streamed:
        """Sends the messages with `stream: true` and reads the answer piece by piece, passing each to
        `state.on_token`; stops reading once the request's deadline has passed."""
        out = _Streamed()
        body = self.request_body(messages, state.sampling)
        with self.client.stream("POST", "/v1/chat/completions", json=body, headers=self.headers) as r:
            if r.status_code != 200:
                r.read()
                raise BackendError(f"server answered {r.status_code}: {r.text[:200]}")
            for event in _sse_data(r.iter_lines()):
                out.timings = event.get("timings") or out.timings
                out.reported = event.get("usage") or out.reported
                for choice in event.get("choices") or ():
                    piece = (choice.get("delta") or {}).get("content") or ""
                    if piece:
                        now = time.perf_counter()
                        out.t_first = out.t_first or now
                        out.t_last = now
                        out.pieces.append(piece)
                        if state.on_token is not None:
                            state.on_token(piece)
                    if choice.get("finish_reason"):
                        out.finish = str(choice["finish_reason"])
                remaining = state.remaining_s()
                if remaining is not None and remaining <= 0:
                    out.finish = "deadline"  # leaving the block closes the connection: the server stops too
                    break
        return out


def _record_usage(usage: Usage, fitted: FittedPrompt, streamed: _Streamed, citations: list[Citation], *,
                  t_send: float, arrival: float) -> None:
    """Token counts and timings (the module docstring defines them): the server's own figures where it sent
    them, else what the stream showed."""
    timings, reported, finish = streamed.timings, streamed.reported, streamed.finish
    t_first, t_last, n_out = streamed.t_first, streamed.t_last, len(streamed.pieces)
    prompt_n, cache_n = timings.get("prompt_n"), timings.get("cache_n")
    prefill = timings.get("prompt_ms")
    ttft_from_send = (t_first - t_send) * 1000 if t_first is not None else None
    tokens_in = int(reported.get("prompt_tokens") or ((prompt_n or 0) + (cache_n or 0)) or fitted.n_tokens)
    tokens_out = int(reported.get("completion_tokens") or timings.get("predicted_n") or n_out)
    tpot = (t_last - t_first) * 1000 / (n_out - 1) if (t_first is not None and t_last is not None and n_out > 1) else None
    usage.tokens_in = tokens_in
    usage.tokens_out = tokens_out
    usage.attrs.update(
        {
            "backend": "http",
            "prompt_tokens": tokens_in,
            "prompt_tokens_evaluated": prompt_n,
            "reused_tokens": cache_n,
            "reused_fraction": (cache_n / tokens_in) if (cache_n is not None and tokens_in) else None,
            "prefill_ms": prefill,
            "queue_ms": max(ttft_from_send - prefill, 0.0) if (ttft_from_send is not None and prefill is not None) else None,
            "ttft_ms": (t_first - arrival) * 1000 if t_first is not None else None,
            "tpot_ms": tpot,
            "tokens_per_s": 1000.0 / tpot if tpot else None,
            "decode_tokens": tokens_out,
            "server_decode_ms": timings.get("predicted_ms"),
            "generate_wall_ms": (time.perf_counter() - t_send) * 1000,
            "finish_reason": finish,
            "incomplete": finish == "deadline",
            "invalid_citations": invalid_markers(citations),
        }
    )
