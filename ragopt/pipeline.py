"""The pipeline core: a chain of stages, each run inside a timed span.

A stage is any object with a `name`, the request fields it `reads` and `writes`, and one typed method,
`run(state) -> state`. It does its one job and may report counters in `state.usage`; timing, tracing,
fallbacks and deadlines live here, not in stages. A pipeline checks its wiring when it is built: a stage
that reads a field no earlier stage writes is an error naming both stages.

Fields (see `RequestState`): "query", "query_vector", "hits", "prompt", "answer", "route" (the backend a
routing stage chose for the request), and "candidates.NAME", the list a retriever named NAME left for fusion. Knobs live on a stage's pydantic `config` (see
`ragopt.config.knob`), so the sweep learns them from the declaration.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

from ragopt.errors import BadRequest, WiringError
from ragopt.trace import Span, Trace, Usage, now_ms
from ragopt.types import Answer, Hit, Query, Sampling


FIELDS = ("query", "query_vector", "candidates", "hits", "prompt", "answer", "route")
REQUEST_INPUTS = ("query",)  # what `Pipeline.run` provides before the first stage


@dataclass
class RequestState:
    """Everything one request carries down the chain. Stages read and replace fields; nothing flows back up."""

    query: Query
    query_vector: Any = None  # set by the embedding stage, read by vector search
    candidates: dict[str, list[Hit]] = field(default_factory=dict)  # per retriever, before fusion
    hits: list[Hit] = field(default_factory=list)  # the current ranking handed to the next stage
    prompt: Any = None  # a FittedPrompt (ragopt.stages.prompt), written by the prompt stage
    answer: Answer | None = None
    route: str | None = None  # the backend a routing stage chose ("small", "default"; ragopt.text.routing)
    deadline: float | None = None  # time.monotonic() value after which work should stop
    arrival: float | None = None  # time.perf_counter() when the request arrived (set by Pipeline.run): TTFT counts from here
    on_token: Callable[[str], None] | None = None  # streaming sink for generators
    sampling: Sampling | None = None  # the request's own generation options (serve), within the plan's limits
    usage: Usage = field(default_factory=Usage)  # reset by the core before each stage
    # candidates.NAME -> (the memo key of the stage run that wrote it, the list it wrote): ragopt.memo keys a later
    # stage's read of that list by the run that made it, while the state still holds that very list
    lineage: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def remaining_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


@runtime_checkable
class Stage(Protocol):
    """A step of the chain. A stage may also declare `span_kind` (OpenInference's RETRIEVER, RERANKER, EMBEDDING,
    LLM), which its span carries to exporters; without it, CHAIN."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def run(self, state: RequestState) -> RequestState: ...


@dataclass
class Step:
    """A stage plus how the core treats its failure: `fallback` runs instead; `required=False` skips it visibly.

    The fallback gets the request state as the failed stage left it (a generator that failed after writing
    `state.prompt` leaves that prompt); the failure itself is recorded in `trace.degraded`. A step with a `route`
    runs only for requests routed there (`state.route`, written by an earlier stage); others pass it without a span.
    """

    stage: Stage
    fallback: Stage | None = None
    required: bool = True
    route: str | None = None


@dataclass
class Result:
    state: RequestState
    trace: Trace

    @property
    def hits(self) -> list[Hit]:
        return self.state.hits

    @property
    def answer(self) -> Answer | None:
        return self.state.answer


def _provides(field_name: str, available: set[str]) -> bool:
    """"candidates" is satisfied by any retriever's list; "candidates.NAME" only by that retriever's."""
    if field_name == "candidates":
        return any(a.startswith("candidates.") for a in available)
    return field_name in available


def check_wiring(stages: Sequence[Stage], inputs: Iterable[str] = REQUEST_INPUTS) -> None:
    """Every field a stage reads is written by a stage before it (or given as an input); else WiringError
    naming the reader and, where one exists, the stage that writes the field too late."""
    available = set(inputs)
    for i, stage in enumerate(stages):
        for need in getattr(stage, "reads", None) or ():
            if _provides(need, available):
                continue
            later = next((s for s in stages[i + 1 :] if _provides(need, set(s.writes))), None)
            where = (f"stage {later.name!r} writes it but comes after {stage.name!r}" if later is not None
                     else "no stage in this pipeline writes it")
            raise WiringError(f"stage {stage.name!r} reads {need!r}, which is not available before it: {where}")
        available |= set(stage.writes)


def _rewrites_answer(stage: Stage) -> bool:
    return "answer" in stage.reads and "answer" in stage.writes


class AnswerStream:
    """What a streaming client receives: the answer's final text, sent as it settles.

    Generators send their raw pieces here (`state.on_token`); an answer's text is that stream stripped. A stage
    after the generator that rewrites the answer (citation attribution, the tool's live sentence) may offer
    `streamer(state)`: a function from the answer text so far to the prefix of its own output that no
    continuation of that text can change. A rewriter without one holds the stream until the answer is done. The
    client gets each newly settled piece and, when the pipeline ends, the rest of the final text: what it received,
    concatenated, is the answer's text, each marker numbered as the answer cites it. The one case where it cannot
    be is a generator that failed after part of its answer was sent, answered then by a fallback: the pipeline
    names it in `trace.degraded`."""

    def __init__(self, sink: Callable[[str], None], steps: Sequence[Step], state: RequestState):
        self.sink, self.steps, self.state = sink, steps, state
        self.raw = self.sent = ""
        self.streamers: list[Callable[[str], str]] | None = None

    def __call__(self, piece: str) -> None:
        self.raw += piece
        if self.streamers is None:  # made at the first piece: the prompt's passages and the route are known by then
            self.streamers = [_streamer(s.stage, self.state) for s in self.steps
                              if _rewrites_answer(s.stage) and s.route in (None, self.state.route)]
        text = self.raw.strip()
        for settled in self.streamers:
            text = settled(text)
        self._send(text)

    def restart(self) -> None:
        """A fallback generator answers anew: the failed one's pieces are no part of its answer."""
        self.raw, self.streamers = "", None

    def _send(self, text: str) -> None:
        if len(text) > len(self.sent) and text.startswith(self.sent):
            self.sink(text[len(self.sent) :])
            self.sent = text

    def finish(self, answer: Answer | None) -> str | None:
        """Send the rest of the answer's text; a note for `trace.degraded` when what was sent is not its start."""
        final = answer.text if answer is not None else ""
        if final.startswith(self.sent):
            self._send(final)
            return None
        return (f"stream: {len(self.sent)} characters were sent before a fallback answered; the streamed text "
                "differs from the answer")


def _streamer(stage: Stage, state: RequestState) -> Callable[[str], str]:
    make = getattr(stage, "streamer", None)
    return make(state) if make is not None else (lambda text: "")


class Pipeline:
    """Compose stages in code: `Pipeline([EmbedQuery(...), VectorSearch(...), Fuse(...), LlamaGenerator(...)])`.

    `inputs` names the fields already filled when the first stage runs (`run_state` on a state that other
    stages prepared); the default is the request's query alone."""

    def __init__(self, steps: Sequence[Stage | Step], inputs: Iterable[str] = REQUEST_INPUTS, memo: Any = None):
        self.memo = memo  # a ragopt.memo.StageMemo: a stage already run on the same inputs is not run again
        self.steps = [s if isinstance(s, Step) else Step(s) for s in steps]
        names = [s.stage.name for s in self.steps]
        if len(set(names)) != len(names):
            raise WiringError(f"stage names must be unique, got {names}")
        for s in self.steps:
            for stage in (s.stage, s.fallback):
                if stage is not None and not (hasattr(stage, "reads") and hasattr(stage, "writes")):
                    raise WiringError(f"stage {stage.name!r} must declare the fields it reads and writes")
        self.inputs = tuple(inputs)
        check_wiring([s.stage for s in self.steps], self.inputs)
        for i, s in enumerate(self.steps):  # a fallback stands in for its stage: it must fit the same place
            if s.fallback is not None:
                check_wiring([*(x.stage for x in self.steps[:i]), s.fallback], self.inputs)
            if s.route is not None and not any("route" in x.stage.writes for x in self.steps[:i]):
                raise WiringError(f"stage {s.stage.name!r} runs on route {s.route!r}, but no stage before it writes 'route'")

    def run(
        self,
        query: Query | str,
        *,
        deadline_s: float | None = None,
        on_token: Callable[[str], None] | None = None,
    ) -> Result:
        arrival = time.perf_counter()
        if isinstance(query, str):
            query = Query(text=query)
        state = RequestState(
            query=query,
            arrival=arrival,
            deadline=None if deadline_s is None else time.monotonic() + deadline_s,
            on_token=on_token,
        )
        return self.run_state(state)

    def run_state(self, state: RequestState) -> Result:
        """Run the steps on a state that earlier stages already filled, e.g. candidates shared by several
        fusion variants in a sweep; the trace covers only these steps."""
        trace = Trace(request_id=uuid.uuid4().hex[:12], query_id=state.query.id)
        t0 = now_ms()
        sink = state.on_token
        stream = None if sink is None or isinstance(sink, AnswerStream) else AnswerStream(sink, self.steps, state)
        state.on_token = stream or sink
        try:
            for step in self.steps:
                state = self._run_step(step, state, trace, t0)
        finally:
            state.on_token = sink
        if stream is not None and (diverged := stream.finish(state.answer)) is not None:
            trace.degraded.append(diverged)
        trace.total_ms = now_ms() - t0
        trace.route = state.route
        return Result(state=state, trace=trace)

    def run_many(self, queries: Iterable[Query], *, progress: bool = True, **kwargs: Any) -> list[Result]:
        from ragopt.progress import progress_bar

        queries = list(queries)
        return [self.run(q, **kwargs) for q in progress_bar(queries, desc="queries", unit="query", disable=not progress, leave=False)]

    def _run_step(self, step: Step, state: RequestState, trace: Trace, t0: float) -> RequestState:
        stage = step.stage
        if step.route is not None and step.route != state.route:
            return state
        remaining = state.remaining_s()
        streamed = isinstance(state.on_token, AnswerStream) and bool(state.on_token.sent) and _rewrites_answer(stage)
        if remaining is not None and remaining <= 0 and not streamed:  # what was sent already holds its rewrites
            trace.spans.append(Span(name=stage.name, kind=getattr(stage, "span_kind", "CHAIN"), start_ms=now_ms() - t0,
                                    ms=0.0, skipped=True, error="deadline"))
            if step.fallback is None:
                trace.degraded.append(f"{stage.name}: skipped, deadline passed")
                return state
            trace.degraded.append(f"{stage.name}: deadline passed -> {step.fallback.name}")
            return self._timed(step.fallback, f"{stage.name}.fallback", state, trace, t0)
        key = self.memo.key(stage, state) if self.memo is not None else None
        if key is not None and self.memo.restore(key, stage, state, trace, t0):
            return state
        try:
            state = self._timed(stage, stage.name, state, trace, t0)
            if key is not None:
                self.memo.store(key, stage, state, trace.spans[-1])
            return state
        except Exception as exc:  # a stage failure degrades visibly, never silently
            reason = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, BadRequest):  # the request itself cannot be honoured: no fallback answers it
                raise
            if step.fallback is not None:
                if isinstance(state.on_token, AnswerStream):
                    state.on_token.restart()
                trace.degraded.append(f"{stage.name}: {reason} -> {step.fallback.name}")
                return self._timed(step.fallback, f"{stage.name}.fallback", state, trace, t0)
            if not step.required:
                trace.degraded.append(f"{stage.name}: {reason} -> skipped")
                return state
            raise

    @staticmethod
    def _timed(stage: Stage, span_name: str, state: RequestState, trace: Trace, t0: float) -> RequestState:
        warm = getattr(stage, "warm", None)
        if warm is not None:  # loading a model or building an index is not the request's time
            warm()
        state.usage = Usage()
        items_in = len(state.hits)
        start = now_ms()
        span = Span(name=span_name, kind=getattr(stage, "span_kind", "CHAIN"), start_ms=start - t0, ms=0.0,
                    items_in=items_in, answered="answer" in stage.writes and "answer" not in stage.reads)
        trace.spans.append(span)
        try:
            state = stage.run(state)
        except Exception as exc:
            span.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            span.ms = now_ms() - start
            span.usage = state.usage
        span.items_out = len(state.hits)
        if state.usage.attrs.get("degraded"):  # the stage answered in a lesser way, and says why
            trace.degraded.append(f"{span_name}: {state.usage.attrs['degraded']}")
        if state.answer is not None and state.answer.incomplete and not any(d.startswith(f"{span_name}: answer") for d in trace.degraded):
            trace.degraded.append(f"{span_name}: answer incomplete ({state.answer.finish_reason})")
        return state
