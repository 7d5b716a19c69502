"""Racing trials on questions: answer only what can still change the sweep's pick.

A sweep whose answers come from an LLM pays per answer. Racing (F-Race, successive halving) spends that budget on
the trials that can still win, under the sweep's own objective (the cheapest trial that passes every gate):

1. Screening, no answer at all: every trial's pipeline runs up to its prompt on every question, which measures its
   retrieval metrics and its context tokens on all of them. Those figures are the full grid's own, so a gate on
   them is decided as the grid decides it: a trial that fails one is dropped and never answered.
2. Rounds over growing, nested, seeded question subsets (`race_schedule`, e.g. 10%, 25%, 50%, 100%), one trial
   at a time in the objective's order, cheapest first. After each round, a gate on an answer metric is decided
   beyond noise only: the interval of the metric's mean over the answered questions (`mean_interval`: Wilson for
   0/1 scores) lies wholly past its threshold. A trial is tested after every round but the last, on every answer
   gate, so each test is made at `per_test_confidence` (Bonferroni over those tests): the chance that any of them
   drops a trial whose true figures pass is at most 1 - `race_confidence` (docs/sweep.md gives it as simulated,
   scripts/race_drop_chance.py). A trial that fails a gate that way is dropped; one that does not answers the next
   round, the last being every question.
3. The first trial that passes every gate on every question, as the grid measures it, is the leader: the grid
   picks no trial that costs more (context tokens, measured on every question), so every such trial is dropped
   without answering. Trials as cheap as the leader still race (the grid breaks their tie on latency), and the
   grid's selection runs over the trials measured on every question.

Answers are remembered by the stage memo (the answer of the same passages) and each round's outcomes by the
trial-outcome cache, so a raced sweep run again, or widened to the full grid, reuses every answer it made.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ragopt.eval.executor import QueryOutcome
from ragopt.eval.gates import Gate, evaluate_gates, is_cost, objective_key, quality_metric
from ragopt.eval.heldout import mean_interval
from ragopt.eval.results import Costs, Generations, Interval, RaceInfo, RaceRound, RaceSummary, Trial
from ragopt.plan import PlanConfig

RACING, DROPPED, MEASURED = "racing", "dropped", "measured"
# costs the screening measures on every question, as the full grid does (latencies need the answers)
SCREENED_COSTS = ("context_tokens", "index_build_s", "index_bytes", "n_chunks")
PASS, FAIL, OPEN = "pass", "fail", "open"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def round_sizes(n_questions: int, schedule: Sequence[float], min_questions: int) -> list[int]:
    """Questions answered by the end of each round: each share of `n_questions`, at least `min_questions` (or all),
    rounds that would answer no new question left out; the last is every question."""
    sizes: list[int] = []
    for share in schedule:
        size = min(n_questions, max(math.ceil(share * n_questions), min(min_questions, n_questions)))
        if not sizes or size > sizes[-1]:
            sizes.append(size)
    return sizes


def question_order(n_questions: int, seed: int) -> list[int]:
    """The seeded order questions are answered in; round r answers its first `round_sizes[r]`."""
    return [int(i) for i in np.random.default_rng(seed).permutation(n_questions)]


def fresh_generations(outcomes: Sequence[QueryOutcome]) -> Generations:
    """What the outcomes cost in generation: answers, and the generator calls among them made now (not restored
    by the memo, not read back from an earlier run), with their tokens."""
    made = tokens_in = tokens_out = 0
    for o in outcomes:
        spans = [] if o.trace is None else [s for s in o.trace.spans if s.answered and not s.skipped]
        for span in spans:
            if "memo" not in span.usage.attrs and span.error is None:
                made += 1
                tokens_in += span.usage.tokens_in
                tokens_out += span.usage.tokens_out
    return Generations(answers=sum(1 for o in outcomes if o.answer is not None), generated=made,
                       tokens_in=tokens_in, tokens_out=tokens_out)


@dataclass
class Standing:
    """One trial in the race: its screening on every question, its answers so far, and where it stands."""

    tid: str
    plan: PlanConfig
    screen: Trial  # retrieval metrics and screened costs on every question
    screen_outcomes: list[QueryOutcome]
    index: Any
    answered: dict[str, QueryOutcome] = field(default_factory=dict)  # query id -> outcome with its answer
    scored: Trial | None = None  # every metric over the answered questions (per_query in `scored_ids` order)
    scored_ids: list[str] = field(default_factory=list)
    status: str = RACING
    round: int = 0
    reason: str | None = None


@dataclass
class RaceContext:
    """What deciding a gate needs: the gates, the questions, how confident the race's decisions must be together
    (`confidence`) and how many tests a trial can meet (`tests`: rounds tested x answer gates)."""

    gates: list[Gate]
    n_questions: int
    confidence: float
    seed: int
    tests: int = 1

    @property
    def per_test_confidence(self) -> float:
        """The confidence of each test, so that all of a trial's tests together hold at `confidence`."""
        return per_test_confidence(self.confidence, self.tests)


def per_test_confidence(confidence: float, tests: int) -> float:
    """Bonferroni: each of `tests` decisions at this confidence, so that all of them together hold at `confidence`
    (the chance that any one errs is at most the sum of theirs, 1 - `confidence`)."""
    return 1 - (1 - confidence) / max(1, tests)


def answer_gates(gates: Sequence[Gate], names: Sequence[str]) -> list[Gate]:
    """The gates decided on answers, round by round: not on a retrieval metric or cost screening measures, nor on a
    latency (decided once every question is answered)."""
    retrieval = retrieval_names(list(names))
    return [g for g in gates if g.metric not in retrieval and g.metric not in SCREENED_COSTS and not is_cost(g.metric)]


def gate_state(gate: Gate, s: Standing, ctx: RaceContext) -> tuple[str, str]:
    """(PASS | FAIL | OPEN, why) for one gate on what `s` has measured so far."""
    if gate.metric in s.screen.metrics or gate.metric in SCREENED_COSTS:  # measured on every question by screening
        screened = s.screen.metrics.get(gate.metric, getattr(s.screen.costs, gate.metric, None))
        verdict = gate.evaluate({gate.metric: screened})
        on = f"on all {ctx.n_questions} questions"
        return (PASS if verdict.passed else FAIL), f"{verdict.message} {on}"
    values = s.scored.per_query.get(gate.metric) if s.scored is not None else None
    state, iv = interval_state(gate, values or [], ctx.per_test_confidence, ctx.seed)
    if iv is None:
        return OPEN, f"{gate.metric} not measured yet"
    n = sum(v is not None for v in values)
    shown = f"{gate.metric} = {iv.mean:.3g} [{iv.low:.3g}, {iv.high:.3g}] on {n} questions"
    word = {PASS: "passes", FAIL: "fails", OPEN: "within noise of"}[state]
    return state, f"{shown}: {word} {gate.expr}" + ("" if state == OPEN else " beyond noise")


def interval_state(gate: Gate, values: Sequence[float | None], confidence: float, seed: int) -> tuple[str, Interval | None]:
    """(PASS | FAIL | OPEN, the interval) of a gate on an answer metric's scores so far: PASS or FAIL only when the
    interval of their mean at `confidence` lies wholly past the threshold (None: nothing scored yet)."""
    iv = mean_interval(values, confidence, seed=seed)
    if iv is None:
        return OPEN, None
    above, below = iv.low > gate.threshold, iv.high < gate.threshold
    if gate.op in (">=", ">"):
        return (PASS if above else FAIL if below else OPEN), iv
    return (PASS if below else FAIL if above else OPEN), iv


def decide(standings: Sequence[Standing], ctx: RaceContext, round_no: int) -> list[Standing]:
    """Drop the racing trials that fail a gate, then those that cost more than the leader. Returns the dropped."""
    racing = [s for s in standings if s.status == RACING]
    states = {s.tid: [gate_state(g, s, ctx) for g in ctx.gates] for s in racing}
    dropped = []
    for s in racing:
        failed = [why for state, why in states[s.tid] if state == FAIL]
        if failed:
            s.status, s.round, s.reason = DROPPED, round_no, "fails a gate: " + failed[0]
            dropped.append(s)
    passing = [s for s in racing if s.status == RACING and all(state == PASS for state, _ in states[s.tid])]
    if passing:
        quality = quality_metric(ctx.gates)
        leader = min(passing, key=lambda s: objective_key(s.screen, quality))
        cost = objective_key(leader.screen, quality)[0]
        for s in racing:
            if s.status == RACING and objective_key(s.screen, quality)[0] > cost:
                s.status, s.round = DROPPED, round_no
                s.reason = (f"costs more than the leader {leader.tid} ({_tokens(s)} vs {_tokens(leader)} context tokens "
                            f"on all {ctx.n_questions} questions), which passes every gate")
                dropped.append(s)
    return dropped


def _tokens(s: Standing) -> str:
    value = s.screen.costs.context_tokens
    return "unmeasured" if value is None else f"{value:.0f}"


ScoreFn = Callable[[Standing, list[QueryOutcome]], Trial]
# runs each (standing, questions) pair through the whole plan; the outcomes in the order of the questions
RunBatch = Callable[[list[tuple[Standing, list[Any]]]], list[list[QueryOutcome]]]


def run_rounds(standings: list[Standing], queries: list[Any], sizes: list[int], order: list[int], ctx: RaceContext,
               run_batch: RunBatch, score: ScoreFn, progress: bool) -> tuple[list[RaceRound], Generations]:
    """The rounds after screening, one trial at a time in the objective's order (cheapest first): each answers
    round after round until it fails a gate beyond noise or has answered every question. The first trial that
    then passes every gate on every question is the leader, the grid's pick unless a trial as cheap ties it, and
    every trial that costs more is dropped unanswered. Returns what each round did and the generations made."""
    quality = quality_metric(ctx.gates)
    racing = sorted((s for s in standings if s.status == RACING), key=lambda s: objective_key(s.screen, quality))
    answered_in, dropped_in = [0] * len(sizes), [[] for _ in sizes]
    made_in = [Generations() for _ in sizes]
    leader: Standing | None = None
    for s in racing:
        if leader is not None and objective_key(s.screen, quality)[0] > objective_key(leader.screen, quality)[0]:
            s.status, s.round = DROPPED, len(sizes)
            s.reason = (f"costs more than the leader {leader.tid} ({_tokens(s)} vs {_tokens(leader)} context tokens "
                        f"on all {ctx.n_questions} questions), which passes every gate on every question")
            dropped_in[-1].append(s.tid)
            continue
        before = 0
        for round_no, size in enumerate(sizes, start=1):
            outcomes = run_batch([(s, [queries[i] for i in order[before:size]])])[0]
            made_in[round_no - 1] = made_in[round_no - 1].plus(fresh_generations(outcomes))
            s.answered.update((o.query_id, o) for o in outcomes)
            s.scored_ids = [queries[i].id for i in order[:size]]
            s.scored = score(s, [s.answered[qid] for qid in s.scored_ids])
            s.round, before = round_no, size
            answered_in[round_no - 1] += 1
            if size < len(queries) and decide([s], ctx, round_no):
                dropped_in[round_no - 1].append(s.tid)
                break
        if progress:
            _log(f"race: {s.tid} answered {before} questions: " + (s.reason or "every question"))
        if s.status == RACING:
            s.status = MEASURED
            if leader is None and all(v.passed for v in evaluate_gates(s.scored, ctx.gates)):
                leader = s
    rounds, made = [], Generations()
    for i, size in enumerate(sizes):
        made = made.plus(made_in[i])
        rounds.append(RaceRound(round=i + 1, questions=size, racing=answered_in[i], dropped=dropped_in[i],
                                generated=made_in[i].generated))
    return rounds, made


def race_summary(config: Any, sizes: list[int], n_trials: int, rounds: list[RaceRound], screened_out: list[str],
                 made: Generations, ctx: RaceContext) -> RaceSummary:
    return RaceSummary(
        confidence=config.race_confidence, tests=max(1, ctx.tests), per_test_confidence=ctx.per_test_confidence,
        schedule=list(config.race_schedule), min_questions=config.race_min_questions, seed=config.seed,
        round_sizes=sizes, screened_out=screened_out, rounds=rounds, sampled=config.search == "optuna",
        grid_answers=n_trials * ctx.n_questions, generations=made)


def dropped_trial(s: Standing, ctx: RaceContext, query_ids: list[str], keep: set[str], names: list[str]) -> Trial:
    """A dropped trial as results.json shows it: retrieval figures on every question, answer figures on the ones
    it answered (None elsewhere, with their intervals; None where it answered nothing), and why and when it was
    dropped."""
    position = {qid: i for i, qid in enumerate(query_ids)}
    per_query: dict[str, list[float | None]] = {n: list(v) for n, v in s.screen.per_query.items()}
    metrics: dict[str, float | None] = {n: None for n in names}  # every metric the sweep reports, measured or not
    metrics.update(s.screen.metrics)
    intervals: dict[str, Interval] = {}
    costs = Costs(**{n: getattr(s.screen.costs, n) for n in SCREENED_COSTS})
    if s.scored is not None:
        for name, values in s.scored.per_query.items():
            if name in s.screen.metrics:
                continue
            aligned: list[float | None] = [None] * len(query_ids)
            for qid, value in zip(s.scored_ids, values):
                aligned[position[qid]] = value
            if name in keep:
                per_query[name] = aligned
            iv = mean_interval(values, ctx.per_test_confidence, seed=ctx.seed)  # the interval it was tested on
            metrics[name] = None if iv is None else iv.mean
            if iv is not None:
                intervals[name] = iv
        latency = {k: v for k, v in s.scored.costs.model_dump().items() if k.endswith("_ms")}
        costs = costs.model_copy(update=latency)
    unanswered = [None] * len(query_ids)  # a kept metric it never measured: null on every question
    return s.screen.model_copy(update={
        "metrics": metrics, "costs": costs, "per_query": {n: per_query.get(n, unanswered) for n in names if n in keep},
        "intervals": intervals,
        "race": RaceInfo(status=DROPPED, round=s.round, reason=s.reason or "", answered=len(s.scored_ids),
                         questions=len(query_ids))})


ScreenFn = Callable[[str, PlanConfig], tuple[list[QueryOutcome], Any]]  # (outcomes up to the prompt, index)
TrialScoreFn = Callable[[str, PlanConfig, list[QueryOutcome], Any, list[str]], Trial]  # score_trial over some names


def race(plans: list[tuple[str, PlanConfig]], queries: list[Any], ctx: RaceContext, config: Any, names: list[str],
         screen: ScreenFn, run_batch: RunBatch, score: TrialScoreFn, progress: bool) -> tuple[list[Standing], RaceSummary]:
    """Screen every trial on every question, then race the rest on growing subsets (see the module docstring)."""
    from tqdm import tqdm

    retrieval = retrieval_names(names)
    standings = []
    for tid, plan in tqdm(plans, desc="race screening", disable=not progress):
        outcomes, index = screen(tid, plan)
        standings.append(Standing(tid, plan, screened(score(tid, plan, outcomes, index, retrieval), retrieval), outcomes, index))
    screened_out = [s.tid for s in decide(standings, ctx, 0)]
    sizes = round_sizes(len(queries), config.race_schedule, config.race_min_questions)
    ctx.tests = (len(sizes) - 1) * len(answer_gates(ctx.gates, names))
    order = question_order(len(queries), config.seed)
    if progress:
        shares = ", ".join(f"{size} ({size / len(queries):.0%})" for size in sizes)
        _log(f"race: confidence {ctx.confidence:g} ({max(1, ctx.tests)} tests a trial, each at "
             f"{ctx.per_test_confidence:.4g}), seed {ctx.seed}; screening dropped {len(screened_out)} of "
             f"{len(plans)} trials; rounds answer {shares} of {len(queries)} questions")
    rounds, made = run_rounds(standings, queries, sizes, order, ctx, run_batch,
                              lambda s, outs: score(s.tid, s.plan, outs, s.index, names), progress)
    return standings, race_summary(config, sizes, len(plans), rounds, screened_out, made, ctx)


def retrieval_names(names: list[str]) -> list[str]:
    """The rank metrics and span recall among `names` (all named METRIC@K): what screening measures."""
    return [n for n in names if "@" in n]


def screened(trial: Trial, retrieval: list[str]) -> Trial:
    """A trial scored on outcomes without answers, less the answer figures such scoring leaves empty."""
    return trial.model_copy(update={"metrics": {n: v for n, v in trial.metrics.items() if n in retrieval},
                                    "per_query": {n: v for n, v in trial.per_query.items() if n in retrieval}})


def measured_trial(s: Standing, trial: Trial, ctx: RaceContext) -> Trial:
    """A trial that answered every question: the grid's figures, the intervals of its answer metrics beside."""
    intervals = dict(trial.intervals)
    for name, values in trial.per_query.items():
        if name not in s.screen.metrics and name not in intervals:
            iv = mean_interval(values, ctx.confidence, seed=ctx.seed)
            if iv is not None:
                intervals[name] = iv
    return trial.model_copy(update={"intervals": intervals, "race": RaceInfo(
        status=MEASURED, round=s.round, answered=ctx.n_questions, questions=ctx.n_questions)})


def race_lines(summary: RaceSummary) -> list[str]:
    """The race in a few lines for the terminal: its knobs, its rounds, what it saved."""
    g = summary.generations
    share = g.answers / summary.grid_answers if summary.grid_answers else 0.0
    each = summary.per_test_confidence if summary.per_test_confidence is not None else summary.confidence  # older files
    lines = [f"race: confidence {summary.confidence:g} ({summary.tests} tests a trial, each at "
             f"{each:.4g}), schedule {', '.join(f'{s:g}' for s in summary.schedule)} "
             f"(at least {summary.min_questions} questions a round), seed {summary.seed}",
             f"  screening (retrieval only, every question): {len(summary.screened_out)} trials dropped, never answered"]
    lines += [f"  round {r.round}: {r.questions} questions, {r.racing} trials answered, {len(r.dropped)} dropped"
              for r in summary.rounds]
    whose = "the sampled trials'" if summary.sampled else "the full grid's"
    lines.append(f"  answers: {g.answers:,} of {whose} {summary.grid_answers:,} ({share:.1%}); generator calls "
                 f"made: {g.generated:,}, tokens in {g.tokens_in:,}, out {g.tokens_out:,}")
    return lines
