"""The tool stage: live data beside the documents (the seeds' "a tool queries the latest collection status").

After retrieval, a rule over the question (or the config: `call`) decides whether to call the tool: the question
names the subject area (`rule_words`) and asks for the state now (`live_words`), as whole words (Chinese ones as
ragopt.text cuts them: "now" is not in "known"); on the shipped set the rule sends all 47 tool questions and none of
the 279 documentation questions to the tool. The subject comes from the retrieved passages (`subject_pattern`,
"loaded by JOB" in the shipped corpus) and the tool is called with it and the request's tenant within
min(`timeout_s`, time left to the request's deadline) (ragopt.backends.tools: one retry on a connection error
within that budget; a breaker per tool and trial settings). What it returns is, in this order:
- redacted: the configured sensitive fields masked (`redact_fields`, at any depth), and their values wherever
  else they appear in the record, before anything reaches a prompt, a trace or a log (the raw record never leaves
  this module);
- pruned: only the fields the question needs are kept (`keep_fields`, plus each of `field_words`' fields whose
  words the question holds); the span counts the tokens pruning saved (`pruned_tokens`);
- a passage after the documents, marked live (`chunk.metadata["live"]`, with the time it was read), never a
  document: the prompt holds it, an answer can cite it, rankings and caches leave it out (`is_live`).
On a timeout, an error or an open breaker the passage says the live part is missing, the span's trace says why
(`degraded`: "tool_timeout", ...), and the request goes on from the documents alone within the timeout.

A second step after the answer (`LiveAnswer`, slot cite) states the live data with its citation, or marks the
answer incomplete and says that the live part is missing. Nothing here is remembered: both steps have no identity
(ragopt.memo), so no cache key holds a tool result.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from ragopt.config import StrictModel, knob, resolve_target
from ragopt.errors import InputError, ToolUnavailable
from ragopt.pipeline import RequestState
from ragopt.stages.prompt import number_passages
from ragopt.stages.spec import BuildContext, Plan, StageSpec
from ragopt.text import holds_phrase, plain_terms
from ragopt.types import LIVE_DOC_PREFIX, Chunk, Citation, Hit, is_live

MASK = "[redacted]"
SERVICES = ("collection-status",)
_DEFAULT_WORDS = {
    "failure_reason": ["fail", "fails", "failed", "failure", "error", "errors", "why", "reason", "wrong", "broke",
                       "失败", "原因", "为什么", "报错"],
    "rows_loaded": ["rows", "row", "how many", "records", "行", "多少", "条"],
    "started_at": ["when", "time", "last run", "何时", "时间", "什么时候"],
}


class ToolConfig(StrictModel):
    call: Literal["never", "rule", "always"] = knob(
        "rule", sweep=["never", "rule", "always"],
        description="when to call the tool: never, when the question holds one of rule_words and one of live_words, "
                    "or always")
    tool: str = Field("http", description='"http" (url or service, with a JSON schema) or "module:attribute", a '
                      "callable with typed parameters or a LangChain BaseTool")
    name: str = Field("collection_status", min_length=1, description="the tool's name in traces and passages")
    url: str | None = Field(None, description="tool http: the URL to POST the arguments to")
    service: Literal["collection-status"] | None = Field(
        None, description="tool http: start the shipped collection-status service and call it (its schema is known)")
    runs: str | None = Field(None, description="service: the runs JSONL it loads (default: the shipped set's)")
    result_schema: str | None = Field(None, description="the result's JSON schema: inline JSON or a .json file (the "
                                      "fields redaction and pruning may name)")
    timeout_s: float = knob(2.0, sweep=[0.5, 2.0], gt=0, description="the tool's own time for a call, retry included "
                            "(a wait for a worker thread is not in it; the request's deadline can cut it)")
    rule_words: list[str] = Field(default_factory=lambda: [
        "collection", "collect", "collected", "ingest", "ingestion", "load", "loaded", "run", "runs", "status", "fail",
        "failed", "failure", "rows",
        "采集", "失败", "加载", "运行", "状态", "入库"])
    live_words: list[str] = Field(default_factory=lambda: [
        "last", "latest", "recent", "today", "now", "currently", "最近", "上次", "今天", "目前", "现在"],
        description="what asks for the state now, not the documented one (a job's schedule is documentation)")
    subject_pattern: str = Field(r"loaded by ([A-Za-z0-9_]+)", description="regex over the passages, in rank order: "
                                 "its first group is the subject the tool is asked about")
    subject_arg: str = Field("job", description="the argument the subject is passed as (the tenant goes as tenant)")
    redaction: bool = knob(True, sweep=[True, False], description="mask redact_fields before anything sees them")
    redact_fields: list[str] = Field(default_factory=lambda: ["patient_id", "operator", "notes"])
    prune: bool = knob(True, sweep=[True, False], description="keep only the fields the question needs")
    keep_fields: list[str] = Field(default_factory=lambda: ["job", "tenant", "status"])
    field_words: dict[str, list[str]] = Field(default_factory=lambda: dict(_DEFAULT_WORDS))
    breaker_failures: int = Field(3, ge=1)
    breaker_reset_s: float = Field(5.0, gt=0)

    @field_validator("subject_pattern")
    @classmethod
    def _pattern(cls, v: str) -> str:
        try:
            if re.compile(v).groups < 1:
                raise ValueError("subject_pattern needs one group: the subject")
        except re.error as exc:
            raise ValueError(f"subject_pattern is not a regular expression: {exc}") from None
        return v


def _schema_fields(config: ToolConfig) -> tuple[str, ...] | None:
    from ragopt.backends.tools import schema_fields

    if config.result_schema is not None:
        return schema_fields(config.result_schema, "result_schema")
    if config.service == "collection-status":
        from ragopt.backends.collection_status import SCHEMA

        return schema_fields(SCHEMA)
    return None


def open_tool(config: ToolConfig, resources: Any = None) -> Any:
    """The configured tool's client (a service it names started once per process, through `resources`)."""
    from ragopt.backends.tools import CallableTool, HttpTool, LangChainTool

    fields = _schema_fields(config)
    if config.tool == "http":
        if config.url is None and config.service is None:
            raise InputError('tool "http" needs a url or a service', field="url")
        if fields is None:
            raise InputError('tool "http" needs a JSON schema of its result', field="result_schema")
        url = config.url or _service(config, resources).status_url
        return HttpTool(url, config.name, fields)
    if ":" not in config.tool:
        raise InputError(f'unknown tool {config.tool!r}: give "http" or "module:attribute"', field="tool")
    target = resolve_target(config.tool, "tool")
    if hasattr(target, "invoke") and hasattr(target, "args"):
        return LangChainTool(target, config.name, fields)
    if not callable(target):
        raise InputError(f"unknown tool {config.tool!r}: not callable", field="tool")
    try:
        return CallableTool(target, config.name, fields)
    except InputError as exc:  # an untyped parameter: the config key that named the callable
        raise InputError(exc.message, field="tool") from None


def _service(config: ToolConfig, resources: Any) -> Any:
    from ragopt.backends.collection_status import CollectionStatusService
    from ragopt.shipped import shipped_collection_runs

    runs = Path(config.runs) if config.runs else shipped_collection_runs()
    if not runs.is_file():
        raise InputError("the collection runs file is not found", path=runs, field="runs")
    start = lambda: CollectionStatusService(runs)  # noqa: E731
    return resources.get(("tool-service", config.service, str(runs)), start) if resources is not None else start()


def _secrets(value: Any, fields: frozenset[str], redacted: bool, found: set[str], named: set[str]) -> None:
    """Into `found`: the scalar values under a field named in `fields`, at any depth (`named`: those names seen)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in fields:
                named.add(k)
            _secrets(v, fields, redacted or k in fields, found, named)
    elif isinstance(value, list):
        for v in value:
            _secrets(v, fields, redacted, found, named)
    elif redacted and value not in (None, "") and not isinstance(value, bool):
        found.add(str(value))


def _masked(value: Any, fields: frozenset[str], secrets: set[str], pattern: re.Pattern[str] | None) -> Any:
    if isinstance(value, dict):
        return {k: MASK if k in fields and v not in (None, "") else _masked(v, fields, secrets, pattern) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, fields, secrets, pattern) for v in value]
    if isinstance(value, str):
        return pattern.sub(MASK, value) if pattern is not None else value
    return MASK if value is not None and not isinstance(value, bool) and str(value) in secrets else value


def redact(record: dict[str, Any], fields: list[str]) -> tuple[dict[str, Any], list[str]]:
    """`record` with every field named in `fields` masked, in nested records and lists too, and their values masked
    wherever else they appear: inside any string (case-insensitively) and as any other field's whole value. A note
    that names the patient a redacted `patient_id` holds is no way around it. Also: the redacted names found."""
    names, secrets, named = frozenset(fields), set(), set()
    _secrets(record, names, False, secrets, named)
    longest_first = sorted(secrets, key=lambda v: (-len(v), v))  # a secret inside a longer one: the longer wins
    pattern = re.compile("|".join(map(re.escape, longest_first)), re.IGNORECASE) if secrets else None
    return _masked(record, names, secrets, pattern), sorted(named)


def pruned(record: dict[str, Any], terms: list[str], config: ToolConfig) -> dict[str, Any]:
    """The fields the question (its `terms`) needs: `keep_fields`, and each of `field_words` whose words it holds."""
    wanted = set(config.keep_fields) | {f for f, words in config.field_words.items() if any(holds_phrase(terms, w) for w in words)}
    return {k: v for k, v in record.items() if k in wanted}


def render(records: list[dict[str, Any]]) -> str:
    if not records:
        return "no record"
    return " | ".join("; ".join(f"{k}: {v}" for k, v in r.items() if v is not None) for r in records)


class CallTool:
    """The tool step: see the module docstring. Writes the live passage after the documents in `hits`."""

    name = "tool"
    span_kind = "TOOL"
    reads = ("query", "hits")
    writes = ("hits",)

    def __init__(self, config: ToolConfig, client: Any, breaker: Any, count: Any, documents: dict[str, str] | None = None):
        self.config, self.client, self.breaker, self.count = config, client, breaker, count
        self.documents = documents or {}  # doc id -> its text, where the subject may lie outside the chunk retrieved

    def identity(self) -> None:  # live data: never remembered (ragopt.memo), so no cache key holds a result
        return None

    def wanted(self, state: RequestState) -> bool:
        """The rule: whole words (Chinese ones as ragopt.text cuts them), so "now" is not in "known"."""
        if self.config.call != "rule":
            return self.config.call == "always"
        terms = plain_terms(state.query.text)
        return (any(holds_phrase(terms, w) for w in self.config.rule_words)
                and any(holds_phrase(terms, w) for w in self.config.live_words))

    def subject(self, hits: list[Hit]) -> str | None:
        """The first match in the passages in rank order, else in their documents in rank order."""
        pattern = re.compile(self.config.subject_pattern)
        ranked = sorted(hits, key=lambda h: h.rank)
        texts = [h.chunk.text for h in ranked] + [self.documents.get(h.chunk.doc_id, "") for h in ranked]
        return next((m.group(1) for text in texts if (m := pattern.search(text))), None)

    def run(self, state: RequestState) -> RequestState:
        from ragopt.backends.tools import call_tool

        if not self.wanted(state):
            return state
        attrs = state.usage.attrs
        attrs.update({"tool.name": self.config.name, "tool.called": False})
        subject = self.subject(state.hits)
        read_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        meta: dict[str, Any] = {"live": True, "tool": self.config.name, "read_at": read_at, "subject": subject}
        if subject is None:
            meta["missing"] = "tool_no_subject"
            text = "no subject for the tool in the retrieved passages"
        else:
            args = {self.config.subject_arg: subject, "tenant": state.query.tenant}
            try:
                found, attempts = call_tool(self.client, args, self.config.timeout_s, self.breaker, state.deadline)
                attrs.update({"tool.called": True, "tool.attempts": attempts, "tool.records": len(found)})
                text = self._text(found[:1], state.query.text, attrs)
            except ToolUnavailable as exc:
                meta["missing"] = exc.cause
                text = f"unavailable ({exc.cause})"
        if "missing" in meta:
            attrs["degraded"] = f"{meta['missing']} -> documents only"
        chunk = Chunk(id=f"live:{self.config.name}:{subject}", doc_id=f"{LIVE_DOC_PREFIX}{self.config.name}", start=0, end=len(text),
                      text=text, title=f"Live data: {self.config.name} for {subject} (read {read_at})",
                      tenant=state.query.tenant, metadata=meta)
        state.hits = [*state.hits, Hit(chunk=chunk, score=0.0, rank=len(state.hits) + 1, retriever=f"tool:{self.config.name}")]
        return state

    def _text(self, found: list[dict[str, Any]], question: str, attrs: dict[str, Any]) -> str:
        shown, named = found, set()
        if self.config.redaction:
            shown = []
            for r in found:
                masked, names = redact(r, self.config.redact_fields)
                shown.append(masked)
                named.update(names)
        full = render(shown)
        if self.config.prune:
            terms = plain_terms(question)
            shown = [pruned(r, terms, self.config) for r in shown]
        text = render(shown)
        attrs.update({"tool.tokens": self.count(text), "pruned_tokens": self.count(full) - self.count(text),
                      "redacted_fields": sorted(named)})
        return text


class LiveAnswer:
    """After the answer: states the live passage with its [n], or marks the answer incomplete (the live part is
    missing) and says so. An answer with no live passage (the tool was not called) passes unchanged."""

    name = "tool_answer"
    slot = "cite"
    reads = ("query", "hits", "answer")
    writes = ("answer",)

    def identity(self) -> None:
        return None

    def streamer(self, state: RequestState) -> Any:
        """What it adds comes after the answer: the answer streams as it is, the addition once it is complete."""
        return lambda text: text

    def run(self, state: RequestState) -> RequestState:
        passages = number_passages(state.hits)
        live = next((p for p in passages if is_live(p.hit.chunk)), None)
        if live is None or state.answer is None:
            return state
        meta = live.hit.chunk.metadata
        answer = state.answer.model_copy(deep=True)
        if meta.get("missing"):
            answer.text += (f" The live part is missing: {meta['tool']} gave no result ({meta['missing']}); "
                            "this answer covers the documents only.")
            answer.incomplete, answer.finish_reason = True, str(meta["missing"])
        elif not any(c.chunk_id == live.chunk_id for c in answer.citations):
            answer.text += f" Live data ({meta['tool']}, read {meta['read_at']}): {live.hit.chunk.text} [{live.number}]"
            answer.citations.append(Citation(marker=live.number, chunk_id=live.chunk_id, doc_id=live.hit.chunk.doc_id,
                                             source=f"live data, read {meta['read_at']}"))
        state.answer = answer
        return state


def _fields_returned(config: ToolConfig) -> tuple[str, ...] | None:
    if config.tool == "http" or ":" not in config.tool:
        return _schema_fields(config)
    client = open_tool(config)
    try:
        return client.fields
    finally:
        client.close()


def _check(config: ToolConfig, plan: Plan) -> None:
    """Before any work: the tool resolves, its schema parses, and every field redaction or pruning names is one
    the tool returns."""
    if config.call == "never":
        return
    if config.tool != "http" and ":" not in config.tool:
        raise InputError(f'unknown tool {config.tool!r}: give "http" or "module:attribute"', field="tool")
    if config.tool == "http" and config.url is None and config.service is None:
        raise InputError('tool "http" needs a url or a service', field="url")
    if config.tool == "http":
        import importlib.util

        needed = ["httpx"] + (["fastapi", "uvicorn"] if config.service else [])
        missing = [m for m in needed if importlib.util.find_spec(m) is None]
        if missing:
            raise InputError(f"an HTTP tool needs {missing[0]}: pip install 'ragopt[serve]'", field="tool")
    fields = _fields_returned(config)
    if fields is None:
        raise InputError("say what the tool returns: a JSON schema, or a TypedDict/pydantic return annotation",
                         field="result_schema")
    for key, names in (("redact_fields", config.redact_fields if config.redaction else []),
                       ("keep_fields", config.keep_fields), ("field_words", list(config.field_words))):
        unknown = [n for n in names if n not in fields]
        if unknown:
            raise InputError(f"the tool does not return {unknown[0]!r}; it returns {', '.join(fields)}", field=key)


def _build(config: ToolConfig, ctx: BuildContext) -> list[Any] | None:
    if config.call == "never":
        return None
    from ragopt.backends.breaker import CircuitBreaker
    from ragopt.tokencount import token_counter

    settings = json.dumps(config.model_dump(mode="json"), sort_keys=True)
    client = ctx.resources.get(("tool", config.name, settings), lambda: open_tool(config, ctx.resources))
    # one breaker per tool and trial settings: a sweep's 0.5 s trial timing out must not open it for the 2 s trial
    breaker = ctx.resources.get(("tool-breaker", config.name, settings),
                                lambda: CircuitBreaker(config.name, config.breaker_failures, config.breaker_reset_s))
    counter = ctx.resources.get(("token-counter", "embedder", ctx.plan.embedder.fingerprint()),
                                lambda: token_counter("embedder", ctx.plan.embedder))
    documents: dict[str, str] = {}
    if ctx.index is not None:
        for chunk in sorted(ctx.index.chunks, key=lambda c: c.start):
            documents[chunk.doc_id] = documents.get(chunk.doc_id, "") + " " + chunk.text
    call = CallTool(config, client, breaker, lambda text: len(counter.tokenize(text)), documents)
    return [call, LiveAnswer()] if ctx.plan.generates() else [call]


def _ignores(config: ToolConfig) -> set[str]:
    return {"redaction", "prune", "timeout_s"} if config.call == "never" else set()


SPEC = StageSpec("tool", ToolConfig, _build, slot="history", check=_check, ignores=_ignores)
