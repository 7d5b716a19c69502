"""The hospital set's builder: the world's facts (world.py, from data/) rendered into documents (render.py) and asked
about (ask.py), written as evalsets/hospital/{corpus,questions,followups}.jsonl, then the tool questions and the collection runs
(tools.py). One fixed seed drives the few random
choices, so every run writes the same bytes (tests/data/test_shipped_evalset.py re-generates and compares)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Iterator

from hospital.ask import (
    ask_cross_document, ask_fields, ask_follow_ups, ask_from_steps, ask_jobs, ask_known_errors, ask_more_follow_ups,
    ask_multi, ask_superseded,
)
from hospital.documents import Builder
from hospital.tools import build as build_tool_questions
from hospital.render import (
    render_fields, render_glossary, render_job, render_known_error, render_page, render_policy, render_release_notes,
    render_runbook, render_superseded, render_tables, render_team,
)
from hospital.world import (
    COHORTS, GLOSSARY, JOBS, KNOWN_ERRORS, POLICIES, REFERENCE_PAGES, RUNBOOKS, SUPERSEDED, TEAMS, TENANTS,
)

SEED = 20240611
SHIPPED = Path(__file__).resolve().parents[2] / "evalsets" / "hospital"


def build() -> Builder:
    b = Builder(SEED)
    fields, jobs = {}, {}
    for t in TENANTS:
        fields[t.short] = render_fields(b, t)
    superseded = [(s, render_superseded(b, s)) for s in SUPERSEDED]
    for t in TENANTS:
        render_release_notes(b, t)
        render_tables(b, t)
        jobs[t.short] = {j.name: render_job(b, t, j, [e for e in KNOWN_ERRORS if e.tenant is t and e.job == j.name])
                         for j in JOBS if j.schedule(t)}
        for area, team in TEAMS[t.short].items():
            render_team(b, t, area, team)
    errors = [(e, render_known_error(b, e)) for e in KNOWN_ERRORS]
    runbooks = [render_runbook(b, t, rb) for rb in RUNBOOKS for t in ((None,) if "shared" in rb.params else TENANTS)]
    policies = [render_policy(b, p) for p in POLICIES]
    for term, definition in GLOSSARY:
        render_glossary(b, term, definition)
    pages = [render_page(b, t, page) for page in COHORTS + REFERENCE_PAGES for t in TENANTS]

    for t in TENANTS:
        ask_fields(b, t, fields[t.short])
    ask_superseded(b, superseded)
    for t in TENANTS:
        ask_jobs(b, t, jobs[t.short])
    ask_known_errors(b, errors)
    ask_from_steps(b, runbooks, per_doc=2)
    ask_from_steps(b, policies + pages, per_doc=None)
    for t in TENANTS:
        ask_multi(b, t)
        ask_follow_ups(b, t)
    ask_cross_document(b)
    return b


def write_jsonl(path: Path, rows: Iterator[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SHIPPED, help="folder to write (default: %(default)s)")
    args = parser.parse_args(argv)
    b = build()
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "corpus.jsonl", b.corpus_rows())
    write_jsonl(args.out / "questions.jsonl", b.question_rows())
    follow_ups = Builder(SEED + 1)  # its own random stream: questions.jsonl stays as it was
    follow_ups.docs = b.docs
    for t in TENANTS:
        ask_more_follow_ups(follow_ups, t)
    write_jsonl(args.out / "followups.jsonl", follow_ups.question_rows())
    n_runs, n_tool = build_tool_questions(args.out)  # reads the corpus just written
    print(f"{args.out}: {len(b.docs)} documents, {len(b.questions)} questions, {len(follow_ups.questions)} more follow-ups, "
          f"{n_tool} tool questions, {n_runs} collection runs")
