"""Every document of the knowledge base, rendered from the world's facts (world.py) through small templates."""

from __future__ import annotations

import random
from datetime import date, timedelta

from hospital.documents import Builder, Doc, dictionary_of, system_of
from hospital.world import (
    FIELD, FIELDS, GROUP_TEAM, JOB, JOBS, KNOWN_ERRORS, NORTH, OLD_RELEASE, REVISION_AUTHORS, REVISION_NOTES,
    RUNBOOKS, SERVICE_LEVELS, SOURCES, SOUTH, SUPERSEDED, SYSTEMS, SYSTEM_SCOPES, TABLES, TABLE_JOB, TEAMS,
    UPSTREAM, Field, Job, KnownError, Page, Policy, Runbook, Spec, Superseded, Team, Tenant, step,
)


def field_doc(b: Builder, t: Tenant, f: Field, spec: Spec, doc_id: str, title: str, release: str, kind: str) -> Doc:
    """A field dictionary page: North's wiki writes `Key: value` lines, South's an attribute table."""
    doc = b.doc(doc_id, title, t, SYSTEM_SCOPES[f.system], kind)
    system = system_of(t, f.system)
    job = TABLE_JOB.get(spec.table)
    loaded = f"{t.table(job.area, job.target)}, loaded by {job.name}" if job else "not loaded into the warehouse"
    rows = [
        ("Field" if t is NORTH else "Field name", f.name, ""),
        ("System", f"{system}, {t.name}", ""),
        ("Dictionary", release, "release"),
        ("Source table", spec.table, "table"),
        ("Type" if t is NORTH else "Data type", spec.dtype, "dtype"),
        ("Unit" if t is NORTH else "Unit of measure", spec.unit or "not applicable", "unit"),
        ("Meaning" if t is NORTH else "Definition", spec.meaning or f.meaning, "meaning"),
        ("Valid range" if spec.unit else "Valid values", spec.valid, "valid"),
        ("Warehouse", loaded, "loaded"),
    ]
    if t is SOUTH:
        doc.line("| Attribute | Value |")
        doc.line("| --- | --- |")
    for label, value, key in rows:
        doc.line(f"{label}: {value}" if t is NORTH else f"| {label} | {value} |", key)
    doc.add("\n")
    if spec.unit:
        doc.para("Values outside the valid range are quarantined by dq_lab_ranges." if f.system == "lab" else
                 "Values outside the valid range are rejected by the load and kept for review.")
    if spec.note:
        doc.para(f"{'Notes' if t is NORTH else 'Remarks'}: {spec.note}", "note")
    return doc


def render_fields(b: Builder, t: Tenant) -> dict[str, Doc]:
    docs = {}
    for f in FIELDS:
        system = system_of(t, f.system)
        title = f"{f.name} ({system} field dictionary)" if t is NORTH else f"{system} data dictionary: {f.name}"
        release = f"{dictionary_of(t, f.system)} (current)"
        docs[f.name] = field_doc(b, t, f, f.spec(t), f"{t.short}.field.{f.name}", title, release, "field")
    return docs


def render_superseded(b: Builder, s: Superseded) -> Doc:
    t, f = s.tenant, FIELD[s.field]
    old, cutover, suffix = OLD_RELEASE[t.short]
    current = f.spec(t)
    spec = Spec(s.unit, s.valid, s.dtype, current.table, current.meaning,
                f"Superseded on {cutover}. To convert a value of this release to the current unit, {s.factor}.")
    title = f"{f.name} ({t.lab} field dictionary {old}, deprecated)" if t is NORTH else \
        f"{t.lab} data dictionary {old} (deprecated): {f.name}"
    release = f"{old} (DEPRECATED since {cutover}, replaced by {t.lab_dictionary})"
    return field_doc(b, t, f, spec, f"{t.short}.field.{f.name}.{suffix}", title, release, "field-deprecated")


def render_release_notes(b: Builder, t: Tenant) -> Doc:
    old, cutover, _ = OLD_RELEASE[t.short]
    changed = [s for s in SUPERSEDED if s.tenant is t]
    doc = b.doc(f"{t.short}.release-notes.{t.lab.lower()}", f"{t.lab} dictionary {t.lab_dictionary}: release notes",
                t, ("clinical", "ops"), "release-notes")
    doc.para(f"{t.lab_dictionary.capitalize()} of the {t.lab} field dictionary replaces {old} on {cutover}. From that "
             f"date {t.lab} reports the results below in new units; results reported earlier keep their old units "
             "in value_orig, and the warehouse converts them as described in the dictionary release runbook.")
    doc.heading("Changed fields")
    for s in changed:
        spec = FIELD[s.field].spec(t)
        doc.line(f"- {s.field}: unit {s.unit} changes to {spec.unit} ({s.factor}); type {s.dtype} changes to "
                 f"{spec.dtype}; valid range {s.valid} changes to {spec.valid}.", s.field)
    doc.add("\n")
    doc.heading("Unchanged")
    doc.para("All other fields keep their unit, type and valid range.")
    team = TEAMS[t.short]["lab"]
    doc.para(f"Questions: {team.name} in {team.channel}.")
    return doc


def render_tables(b: Builder, t: Tenant) -> None:
    for table, (row, key, per_day) in TABLES.items():
        fields = [f for f in FIELDS if f.spec(t).table == table]
        if not fields:
            continue
        system = system_of(t, fields[0].system)
        job = TABLE_JOB[table]
        doc = b.doc(f"{t.short}.table.{table}", f"{table} ({system} source table, {t.name})", t,
                    SYSTEM_SCOPES[fields[0].system], "table")
        volume = per_day[0] if t is NORTH else per_day[1]
        doc.para(f"{table} is the {system} source table holding {row} per row. Primary key: {key}. About {volume} "
                 f"rows arrive per day. {job.name} loads it into {t.table(job.area, job.target)}.")
        doc.heading("Fields")
        for f in fields:
            spec = f.spec(t)
            unit = f", {spec.unit}" if spec.unit else ""
            summary = (spec.meaning or f.meaning).split(": ")[0].rstrip(".")
            doc.line(f"- {f.name}: {spec.dtype}{unit}. {summary}.", f.name)
        doc.add("\n")
        doc.para(f"Definitions, valid ranges and notes are in the {system} field dictionary, one page per field.")


def render_job(b: Builder, t: Tenant, job: Job, errors: list[KnownError]) -> Doc:
    cron, words = job.schedule(t)
    team = TEAMS[t.short][job.area]
    scopes = ("finance", "ops") if job.area == "billing" else ("ops",)
    source = SOURCES[(t.short, job.area)]
    target = t.table(job.area, job.target)
    minute, hour = cron.split()[:2]
    frequent = minute.startswith("*/") or hour == "*"  # runs at least hourly, so it must finish well within that
    low, high = b.rng.choice([(1, 3), (2, 4), (3, 8)] if frequent else [(5, 12), (10, 25), (20, 45)])
    upstream = ", ".join(UPSTREAM.get(job.name, ())) or "none"
    codes = ", ".join(e.code for e in errors) or "none recorded"
    fields = ", ".join(f.name for f in FIELDS if f.spec(t).table in job.tables)
    if t is NORTH:
        doc = b.doc(f"north.job.{job.name}", f"{job.name} (Airflow DAG, North Hospital)", t, scopes, "job")
        doc.line(f"DAG id: {job.name}")
        doc.line(f"Purpose: {job.purpose}")
        doc.line(f"Schedule: {words} (cron {cron}, local time)", "schedule")
        doc.line(f"Source: {source}", "source")
        doc.line(f"Target: {target}", "target")
        doc.line(f"Owner: {team.name} ({team.channel})", "owner")
        doc.line(f"Upstream DAGs: {upstream}")
        doc.line(f"Typical runtime: {low} to {high} minutes; retries: 2, five minutes apart")
        doc.line(f"Service level: {SERVICE_LEVELS[(t.short, job.area)]}")
        doc.line(f"Alerts: failures post to {t.oncall}; out of hours they page {t.pager}.")
        doc.line(f"Known errors: {codes}")
        doc.line(f"Manual run: `{t.trigger.format(job=job.name)}`")
        doc.add("\n")
        if fields:
            doc.para(f"Fields loaded: {fields}.")
        doc.heading("Recent runs")
        for run in recent_runs(b.rng, cron, low, high):
            doc.line(f"- {run}")
    else:
        doc = b.doc(f"south.job.{job.name}", f"Dagster job {job.name} (South Hospital)", t, scopes, "job")
        doc.para(job.purpose)
        doc.heading("Schedule")
        doc.para(f"Runs {words} (cron `{cron}`, execution_timezone UTC).", "schedule")
        doc.heading("Data flow")
        doc.add(f"Reads from {source}.", "source")
        doc.para(f" Writes to {target}.")
        doc.para(f"Needs first: {upstream}. Typical runtime {low} to {high} minutes; up to 3 retries.")
        doc.heading("Service level")
        doc.para(f"Users can rely on this: {SERVICE_LEVELS[(t.short, job.area)]}.")
        doc.heading("Ownership")
        doc.para(f"Owned by {team.name} ({team.channel}).", "owner")
        doc.para(f"Failures alert {t.pager}.")
        doc.heading("Known errors")
        doc.para(codes)
        if fields:
            doc.heading("Assets")
            doc.para(f"Fields materialised: {fields}.")
        doc.heading("Operations")
        doc.para(f"Launch by hand with `{t.trigger.format(job=job.name)}`. Latest runs:")
        for run in recent_runs(b.rng, cron, low, high):
            doc.line(f"- {run}")
    return doc


def recent_runs(rng: random.Random, cron: str, low: int, high: int) -> list[str]:
    """The last five runs the schedule allows before 2024-11-23, as the scheduler UI lists them."""
    minute, hour, day_of_month, _, day_of_week = cron.split()
    runs: list[str] = []
    day = date(2024, 11, 22)
    while len(runs) < 5:
        if day.day in cron_values(day_of_month, 1, 31) and day.isoweekday() % 7 in cron_values(day_of_week, 0, 6):
            for h in reversed(cron_values(hour, 0, 23)):
                for m in reversed(cron_values(minute, 0, 59)):
                    if len(runs) < 5:
                        outcome = "failed, retried successfully" if rng.random() < 0.1 else "success"
                        runs.append(f"{day} {h:02d}:{m:02d}: {outcome}, {rng.randint(low, high)} min")
        day -= timedelta(days=1)
    return runs


def cron_values(expr: str, low: int, high: int) -> list[int]:
    """The values one cron field allows: `*`, `*/n`, `a`, `a-b`, and comma lists of these."""
    values: list[int] = []
    for part in expr.split(","):
        if part == "*":
            values += range(low, high + 1)
        elif part.startswith("*/"):
            values += range(low, high + 1, int(part[2:]))
        elif "-" in part:
            first, last = map(int, part.split("-"))
            values += range(first, last + 1)
        else:
            values.append(int(part))
    return sorted(values)


def render_known_error(b: Builder, e: KnownError) -> Doc:
    t = e.tenant
    head = e.error.split(":")[0]
    doc = b.doc(f"{t.short}.ke.{e.code}", f"{e.code}: {e.job} fails with {head}", t, ("ops",), "known-error")
    year = b.rng.choice([2022, 2023, 2024])
    seen = f"{year}-{b.rng.randint(1, 12):02d}-{b.rng.randint(1, 28):02d}"
    ticket = f"{t.ticket}-{b.rng.randint(1200, 9800)}"
    doc.para(f"Known error {e.code}, {t.name}, job {e.job}. First seen {seen}; ticket {ticket}.")
    doc.heading("Error")
    doc.para(f"`{e.error}`", "error")
    doc.heading("Symptom")
    doc.para(e.symptom)
    doc.heading("Detection")
    how = b.rng.choice(("and confirmed in the {scheduler} run log", "after the morning row-count check showed a gap",
                        "after users reported stale data on a dashboard"))
    doc.para(f"Detected by the failure alert of {e.job} in {t.oncall}, {how.format(scheduler=t.scheduler)}.")
    job = JOB[e.job]
    redo = "clearing the failed runs" if t is NORTH else "re-materializing the failed partitions"
    doc.heading("Affected data")
    doc.para(f"Runs of {e.job} between the first failure and the fix wrote nothing to {t.table(job.area, job.target)}. "
             f"The source kept every record, so {redo} after the fix closes the gap.")
    doc.heading("Cause")
    with doc.span("cause_fix"):
        doc.para(e.cause)
        doc.heading("Fix")
        doc.para(e.fix, "fix")
    doc.heading("Prevention")
    doc.para(e.prevention)
    return doc


def render_team(b: Builder, t: Tenant, area: str, team: Team) -> Doc:
    doc = b.doc(f"{t.short}.team.{area}", f"Team: {team.name} ({t.name})", t, (), "team")
    jobs = [j.name for j in JOBS if j.area == area and j.schedule(t)]
    runbooks = [rb.title for rb in RUNBOOKS if rb.area == area]
    doc.para(f"{team.name} owns {team.owns}.")
    doc.line(f"Chat channel: {team.channel}", "channel")
    doc.line(f"Working hours: {team.hours}", "hours")
    doc.line(f"Manager: {team.manager}", "manager")
    doc.line(f"Out of hours: {team.pager}", "pager")
    doc.add("\n")
    if jobs:
        doc.para(f"Jobs owned: {', '.join(jobs)}.")
    if runbooks:
        doc.para(f"Runbooks owned: {'; '.join(runbooks)}.")
    return doc


def runbook_params(t: Tenant | None, rb: Runbook) -> dict[str, str]:
    if t is None:
        p = {"scheduler": "the scheduler of your hospital (Airflow in North, Dagster in South)",
             "warehouse": "warehouse of your hospital", "oncall": "#north-data-oncall or #south-data-oncall",
             "ticket": "NDATA or SDATA", "status_page": "your hospital's status page", "pager": GROUP_TEAM.pager}
        return p | rb.params["shared"]
    p = {"lab": t.lab, "emr": t.emr, "warehouse": t.warehouse, "scheduler": t.scheduler, "oncall": t.oncall,
         "dq_channel": t.dq_channel, "ticket": t.ticket, "secrets": t.secrets, "status_page": t.status_page,
         "pager": t.pager, "run_chem": t.trigger.format(job="lab_chem_ingest"),
         "run_heme": t.trigger.format(job="lab_heme_ingest")}
    p |= {f"team_{area}": team.name for area, team in TEAMS[t.short].items()}
    p["changed"] = str(sum(s.tenant is t for s in SUPERSEDED))
    p["factors"] = "; ".join(f"{s.field} from {s.unit} to {FIELD[s.field].spec(t).unit}, {s.factor}"
                             for s in SUPERSEDED if s.tenant is t)
    return p | rb.params[t.short]


def render_runbook(b: Builder, t: Tenant | None, rb: Runbook) -> Doc:
    where = t.short if t else "shared"
    team = TEAMS[t.short][rb.area] if t else GROUP_TEAM
    p = runbook_params(t, rb)
    title = f"Runbook: {rb.title} ({t.name if t else 'group'})"
    doc = b.doc(f"{where}.runbook.{rb.slug}", title, t, rb.scopes, "runbook")
    history = revision_history(b.rng, where, team, t.ticket if t else "NDATA")
    applies = t.name if t else "both hospitals"
    version = f"{len(history)}.{b.rng.randint(0, 4)}"
    doc.para(f"Owner: {team.name} ({team.channel}). Applies to: {applies}. Version {version}, last reviewed "
             f"{history[-1][0]}.")
    doc.heading("Purpose")
    doc.para(rb.purpose.format_map(p))
    doc.heading("Background")
    doc.para(rb.background.format_map(p))
    doc.heading("When to use this runbook")
    doc.steps([step(x) for x in rb.triggers], p, "trigger")
    doc.heading("Roles and contacts")
    doc.steps([step("Runbook owner: {owner} ({owner_channel}); manager {manager}."),
               step("First responder: whoever holds the data on-call rotation, reachable in {oncall}."),
               step("Out of hours: {owner_pager}."),
               step("Incident commander for severity 1: the duty manager named in the on-call schedule.")],
              p | {"owner": team.name, "owner_channel": team.channel, "manager": team.manager,
                   "owner_pager": team.pager}, "role")
    doc.heading("Before you start")
    doc.steps([step("You can log in to {scheduler} and to the {warehouse} with your personal administrator account; "
                     "shared accounts are never used for manual steps."),
               step("An incident or change ticket exists in the {ticket} queue, and every command you run goes into "
                    "it with its output."),
               step("You have read the Known pitfalls section below."),
               *[step(x) for x in rb.prerequisites]], p, "before")
    doc.heading("Systems involved")
    doc.steps([step(x) for x in SYSTEMS[where]], p, "system")
    doc.heading("Communication")
    doc.para("Post a first message in {oncall} within 15 minutes: what is affected, since when, and the ticket number. "
             "For severity 1 and 2, update the ticket every 30 minutes until the incident is resolved, even when "
             "nothing changed. When clinical users are affected (results or vital signs missing from dashboards), the "
             "service desk publishes a notice on {status_page}; do not contact the wards directly. Close the ticket "
             "with a summary: the cause, the fix, the data affected and the follow-up actions.".format_map(p))
    doc.heading("Procedure")
    doc.steps(rb.steps, p, "step", numbered=True)
    doc.heading("Verification")
    doc.steps(rb.checks, p, "check")
    doc.heading("Rollback")
    doc.steps(rb.rollback, p, "rollback")
    doc.heading("Known pitfalls")
    doc.steps(rb.pitfalls, p, "pitfall")
    doc.heading("Escalation")
    doc.steps([step("No progress after 60 minutes: escalate to {pager} and inform {manager}."),
               step("Clinical data missing for more than 4 hours: raise the incident to severity 1, as the group "
                    "incident severity runbook requires."),
               step("Suspected exposure of patient data: stop, and follow the group data leak response runbook.")],
              p | {"manager": team.manager}, "escalation")
    doc.heading("Handover")
    doc.para("If your shift ends before the work is done, hand over in the ticket, not only in chat: what was done, "
             "with the commands and their output; what is running now; what comes next; and who was informed. The "
             "next on-call confirms the handover in {oncall}. Never leave a paused job, a muted alert or an open "
             "maintenance window without an owner and an end time.".format_map(p))
    related = related_documents(doc.text, t)
    doc.heading("Related documents")
    doc.steps([step(x) for x in related], {}, "related")
    doc.heading("Revision history")
    for day, author, note in history:
        doc.line(f"- {day}, {author}: {note}")
    return doc


def related_documents(text: str, t: Tenant | None) -> list[str]:
    """Cross-links a wiki adds under a page: known errors of the jobs and dictionary pages of the fields it names."""
    related = []
    if t is not None:
        jobs = [j.name for j in JOBS if j.schedule(t) and j.name in text]
        codes = [e.code for e in KNOWN_ERRORS if e.tenant is t and e.job in jobs]
        if codes:
            related.append(f"Known errors of the jobs named above: {', '.join(codes)}.")
        fields = [f.name for f in FIELDS if f.name in text]
        if fields:
            related.append(f"Field dictionary pages: {', '.join(fields)}.")
    related.append("Group runbooks: Data incident severity and communication; Suspected data leak response.")
    return related


def revision_history(rng: random.Random, where: str, team: Team, ticket: str) -> list[tuple[str, str, str]]:
    authors = [*REVISION_AUTHORS[where], team.manager]
    dates = sorted(f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}" for year in (2021, 2023, 2024))
    notes = ["Initial version.", *rng.sample(REVISION_NOTES, 2)]
    return [(d, rng.choice(authors), n.format(ticket=ticket, n=rng.randint(1200, 9800))) for d, n in zip(dates, notes)]


def render_policy(b: Builder, p: Policy) -> Doc:
    where = p.tenant.short if p.tenant else "shared"
    doc = b.doc(f"{where}.policy.{p.slug}", p.title, p.tenant, p.scopes, "policy")
    applies = p.tenant.name if p.tenant else "North Hospital and South Hospital"
    doc.para(f"Owner: {p.owner}. Applies to: {applies}.")
    doc.heading("Purpose")
    doc.para(p.purpose)
    for n, (heading, steps) in enumerate(p.sections, start=1):
        doc.heading(heading)
        doc.steps(steps, {}, f"s{n}")
    doc.heading("Exceptions")
    doc.para(f"Exceptions are requested in writing from the policy owner ({p.owner}), last at most 12 months and "
             "are listed in the exceptions register.")
    doc.heading("Review")
    doc.para("This policy is reviewed every two years, and earlier after any incident that involved it.")
    return doc


def render_glossary(b: Builder, term: str, definition: str) -> Doc:
    slug = "".join(c if c.isalnum() else "-" for c in term.lower()).strip("-")
    doc = b.doc(f"shared.glossary.{slug}", f"Glossary: {term}", None, (), "glossary")
    doc.para(definition, "definition")
    return doc


def render_page(b: Builder, t: Tenant, page: Page) -> Doc:
    doc = b.doc(f"{t.short}.{page.kind}.{page.slug}", f"{page.title} ({t.name})", t, page.scopes, page.kind)
    params = {f"team_{area}": team.name for area, team in TEAMS[t.short].items()} | page.values[t.short]
    doc.para(page.purpose.format_map(params))
    for n, (heading, steps) in enumerate(page.sections, start=1):
        doc.heading(heading)
        doc.steps(steps, params, f"s{n}")
    return doc
