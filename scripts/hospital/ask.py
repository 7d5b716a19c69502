"""The questions: each points at the exact span that answers it, asked by someone who may see its evidence."""

from __future__ import annotations

from hospital.documents import Builder, Doc, system_of
from hospital.world import (
    ALWAYS_ASKED_UNITS, COHORTS, ERROR_QUESTIONS, FIELD, FIELDS, JOB, JOBS, NORTH, OLD_RELEASE, RANGE_QUESTIONS,
    SCHEDULE_QUESTIONS, SOURCES, SOUTH, SUPERSEDED, TABLE_JOB, TEAMS, TENANTS, UNIT_QUESTIONS, VALUES_QUESTIONS,
    Asker, Field, KnownError, Superseded, Tenant, askers,
)


def field_asker(b: Builder, t: Tenant, f: Field) -> Asker:
    who = askers(t)
    return who["finance"] if f.system == "billing" else who[b.rng.choice(("clinical", "ops", "lead"))]


def graded(b: Builder, t: Tenant, canonical: Doc, f: Field, fact: str) -> dict[Doc, int] | None:
    """Grade 2 for the page a question cites, grade 1 for other pages that state the same `fact` of field `f`:
    the source table page lists units, types and tables; a dictionary release that changed the field lists its
    old and new unit, type and range, and the release runbook converts between the units."""
    changed = any(s.field == f.name and s.tenant is t for s in SUPERSEDED)
    also = []
    if fact in ("unit", "dtype", "table"):
        also.append(b.docs[f"{t.short}.table.{f.spec(t).table}"])
    if changed and fact in ("unit", "dtype", "valid", "old unit"):
        also.append(b.docs[f"{t.short}.release-notes.{t.lab.lower()}"])
    if changed and fact in ("unit", "old unit"):
        also.append(b.docs[f"{t.short}.runbook.dictionary-release"])
    return {canonical: 2} | {d: 1 for d in also} if also else None


def ask_fields(b: Builder, t: Tenant, fields: dict[str, Doc]) -> None:
    rng = b.rng
    numeric = [f for f in FIELDS if f.spec(t).unit]
    codes = [f for f in FIELDS if not f.spec(t).unit]

    def ask(kind: str, f: Field, text: str, answer: str, key: str) -> None:
        doc = fields[f.name]
        b.ask(f"{kind}-{t.short}-{f.name.lower()}", text.format(field=f.name, system=system_of(t, f.system)), answer,
              [(doc, key)], field_asker(b, t, f), relevance=graded(b, t, doc, f, key))

    others = [f for f in numeric if f.name not in ALWAYS_ASKED_UNITS]
    unit_fields = [FIELD[n] for n in ALWAYS_ASKED_UNITS] + rng.sample(others, 6)
    for f in unit_fields:
        ask("unit", f, rng.choice(UNIT_QUESTIONS), f.spec(t).unit, "unit")
    for f in rng.sample(numeric, 5):
        ask("range", f, rng.choice(RANGE_QUESTIONS), f.spec(t).valid, "valid")
    for f in rng.sample(codes, 4):
        ask("values", f, rng.choice(VALUES_QUESTIONS), f.spec(t).valid.split(";")[0], "valid")
    for f in [f for f in FIELDS if f.north.table != f.south.table]:
        ask("table", f, "Which source table holds {field} in {system}?", f.spec(t).table, "table")
    for f in rng.sample(FIELDS, 3):
        ask("type", f, "What data type does {field} have in {system}?", f.spec(t).dtype, "dtype")


def ask_superseded(b: Builder, superseded: list[tuple[Superseded, Doc]]) -> None:
    for s, doc in superseded:
        t = s.tenant
        _, cutover, _ = OLD_RELEASE[t.short]
        text = f"Before {t.lab} {t.lab_dictionary} took effect on {cutover}, which unit did {s.field} use?"
        b.ask(f"unit-old-{t.short}-{s.field.lower()}", text, s.unit, [(doc, "unit")], askers(t)["lead"],
              relevance=graded(b, t, doc, FIELD[s.field], "old unit"))


def ask_jobs(b: Builder, t: Tenant, jobs: dict[str, Doc]) -> None:
    rng = b.rng
    ops = askers(t)["ops"]
    names = sorted(jobs)
    for name in rng.sample(names, 7):
        text = rng.choice(SCHEDULE_QUESTIONS).format(job=name)
        b.ask(f"schedule-{t.short}-{name}", text, JOB[name].schedule(t)[1], [(jobs[name], "schedule")], ops)
    for name in rng.sample(names, 3):
        area = JOB[name].area
        team_doc = b.docs[f"{t.short}.team.{area}"]  # its list of the jobs the team owns also answers
        b.ask(f"owner-{t.short}-{name}", f"Which team owns {name}?", TEAMS[t.short][area].name,
              [(jobs[name], "owner")], ops, relevance={jobs[name]: 2, team_doc: 1})
    for name in rng.sample(names, 2):
        b.ask(f"source-{t.short}-{name}", f"Where does {name} read its data from?",
              SOURCES[(t.short, JOB[name].area)], [(jobs[name], "source")], ops)


def ask_known_errors(b: Builder, errors: list[tuple[KnownError, Doc]]) -> None:
    rng = b.rng
    for e, doc in sorted(rng.sample(errors, 30), key=lambda pair: pair[0].code):
        text = rng.choice(ERROR_QUESTIONS).format(job=e.job, error=e.error, head=e.error.split(":")[0])
        b.ask(f"error-{e.tenant.short}-{e.code.lower()}", text, e.answer, [(doc, "cause_fix")], askers(e.tenant)["ops"])


def doc_asker(b: Builder, doc: Doc) -> Asker:
    """Someone entitled to read `doc`: of its hospital (or either, for shared documents), with a fitting scope."""
    t = doc.tenant or b.rng.choice(TENANTS)
    if not doc.scopes:
        return askers(t)[b.rng.choice(("clinical", "ops", "finance"))]
    return Asker(t, doc.scopes[:1]) if len(doc.scopes) == 1 or "finance" in doc.scopes else askers(t)["lead"]


def ask_from_steps(b: Builder, docs: list[Doc], per_doc: int | None) -> None:
    """Questions attached to runbook, policy and cohort steps: `per_doc` of each document's (all if None)."""
    for doc in docs:
        asks = doc.asks if per_doc is None else b.rng.sample(doc.asks, min(per_doc, len(doc.asks)))
        for key, text, answer in asks:
            qid = f"{doc.kind}-{doc.id.replace('.', '-').replace(f'-{doc.kind}-', '-')}-{key}"
            b.ask(qid, text, answer, [(doc, key)], doc_asker(b, doc))


def ask_multi(b: Builder, t: Tenant) -> None:
    """Questions that need two evidence spans, usually two documents joined by a name."""
    rng, who, short, d = b.rng, askers(t), t.short, b.docs
    jobs = sorted(j.name for j in JOBS if j.schedule(t))
    for name in rng.sample(jobs, 3):
        team_doc = d[f"{short}.team.{JOB[name].area}"]
        b.ask(f"multi-{short}-manager-{name}", f"Who manages the team that owns {name}?",
              TEAMS[short][JOB[name].area].manager, [(d[f"{short}.job.{name}"], "owner"), (team_doc, "manager")],
              who["ops"])
    for name in rng.sample(jobs, 2):
        team_doc = d[f"{short}.team.{JOB[name].area}"]
        b.ask(f"multi-{short}-hours-{name}", f"During which hours does the team behind {name} work?",
              TEAMS[short][JOB[name].area].hours, [(d[f"{short}.job.{name}"], "owner"), (team_doc, "hours")],
              who["ops"])
    loaded = [f for f in FIELDS if f.system != "billing" and f.spec(t).table in TABLE_JOB]
    for f in rng.sample(loaded, 2):
        job = TABLE_JOB[f.spec(t).table]
        evidence = [(d[f"{short}.field.{f.name}"], "loaded"), (d[f"{short}.job.{job.name}"], "schedule")]
        b.ask(f"multi-{short}-refresh-{f.name.lower()}", f"How often is {f.name} refreshed in the warehouse?",
              job.schedule(t)[1], evidence, who["lead"])
    cohort = COHORTS[0]
    b.ask(f"multi-{short}-registry-hba1c",
          f"Which HbA1c value puts a patient in the diabetes registry, and in which unit does {t.lab} store LAB_HBA1C?",
          cohort.values[short]["hba1c"],
          [(d[f"{short}.cohort.{cohort.slug}"], "s1-1"), (d[f"{short}.field.LAB_HBA1C"], "unit")], who["clinical"])


def ask_cross_document(b: Builder) -> None:
    """Hand-picked two-document questions: a hospital rule that overrides a group rule, and a known error whose
    fix is a runbook step."""
    north, south, d = askers(NORTH), askers(SOUTH), b.docs
    group_retention = d["shared.policy.retention-schedule"]
    b.ask("multi-north-retention-hl7", "How long are raw HL7 lab messages kept?", "180 days",
          [(d["north.policy.retention-addendum"], "s1-1"), (group_retention, "s1-1")], north["ops"])
    b.ask("multi-south-retention-staging", "How long are warehouse staging tables kept?", "5 days",
          [(d["south.policy.retention-addendum"], "s1-1"), (group_retention, "s1-2")], south["ops"])
    b.ask("multi-north-keytab-lead-time",
          "KE-N-108 says the keytab expired. How far ahead must a keytab renewal be requested?", "3 working days",
          [(d["north.ke.KE-N-108"], "cause_fix"), (d["north.runbook.credential-rotation"], "step-2")], north["ops"])
    b.ask("multi-south-secret-reload",
          "After fixing KE-S-205 with a new client secret, what must be done so that new runs use it?",
          "reload the code location sdw_pipelines",
          [(d["south.ke.KE-S-205"], "cause_fix"), (d["south.runbook.credential-rotation"], "step-6")], south["ops"])


def ask_follow_ups(b: Builder, t: Tenant) -> None:
    """Second turns of a conversation: the question only makes sense with the history before it."""
    rng, short, d = b.rng, t.short, b.docs
    loaded = [f for f in FIELDS if f.system == "lab" and f.spec(t).table in TABLE_JOB]
    for f in rng.sample(loaded, 2):
        job = TABLE_JOB[f.spec(t).table]
        history = [("user", f"Which job loads {f.name} into the warehouse?"),
                   ("assistant", f"{job.name} loads it into {t.table(job.area, job.target)} [1].")]
        b.ask(f"followup-{short}-schedule-{f.name.lower()}", "How often does it run?", job.schedule(t)[1],
              [(d[f"{short}.job.{job.name}"], "schedule")], askers(t)["ops"], history=history)
    numeric = [f for f in FIELDS if f.system != "billing" and f.spec(t).unit]
    for f in rng.sample(numeric, 2):
        spec = f.spec(t)
        history = [("user", f"What unit is {f.name} in?"), ("assistant", f"{spec.unit} [1].")]
        doc = d[f"{short}.field.{f.name}"]
        b.ask(f"followup-{short}-range-{f.name.lower()}", "And what is its valid range?", spec.valid, [(doc, "valid")],
              askers(t)["clinical"], relevance=graded(b, t, doc, f, "valid"), history=history)


def ask_more_follow_ups(fb: Builder, t: Tenant) -> None:
    """followups.jsonl: second turns in five shapes, so that follow-up resolution is measured on more than two
    templates. The pronoun refers to the entity of the user's turn (unit, owner) or to the one the answer named
    (manager, source); "What about X?" repeats the last question for another field."""
    rng, short, d, who = fb.rng, t.short, fb.docs, askers(t)
    jobs = sorted(j.name for j in JOBS if j.schedule(t))
    for name in rng.sample(jobs, 3):
        team = TEAMS[short][JOB[name].area]
        history = [("user", f"Which team owns {name}?"), ("assistant", f"{name} is owned by {team.name} [1].")]
        fb.ask(f"followup-{short}-manager-{name}", "Who manages that team?", team.manager,
               [(d[f"{short}.team.{JOB[name].area}"], "manager")], who["ops"], history=history)
    for name in rng.sample(jobs, 3):
        job, team_doc = JOB[name], d[f"{short}.team.{JOB[name].area}"]
        history = [("user", f"When does {name} run?"), ("assistant", f"{job.schedule(t)[1]} [1].")]
        fb.ask(f"followup-{short}-owner-{name}", "Which team owns it?", TEAMS[short][job.area].name,
               [(d[f"{short}.job.{name}"], "owner")], who["ops"], relevance={d[f"{short}.job.{name}"]: 2, team_doc: 1},
               history=history)
    loaded = [f for f in FIELDS if f.system == "lab" and f.spec(t).table in TABLE_JOB]
    for f in rng.sample(loaded, 3):
        job = TABLE_JOB[f.spec(t).table]
        history = [("user", f"Which job loads {f.name} into the warehouse?"),
                   ("assistant", f"{job.name} loads it into {t.table(job.area, job.target)} [1].")]
        fb.ask(f"followup-{short}-source-{f.name.lower()}", "Where does it read its data from?",
               SOURCES[(short, job.area)], [(d[f"{short}.job.{job.name}"], "source")], who["ops"], history=history)
    numeric = [f for f in FIELDS if f.system != "billing" and f.spec(t).unit]
    for f in rng.sample([f for f in FIELDS if f.north.table != f.south.table and f.spec(t).unit], 3):
        doc = d[f"{short}.field.{f.name}"]
        history = [("user", f"Which source table holds {f.name} in {system_of(t, f.system)}?"),
                   ("assistant", f"{f.spec(t).table} [1].")]
        fb.ask(f"followup-{short}-unit-{f.name.lower()}", "In which unit is it stored?", f.spec(t).unit, [(doc, "unit")],
               field_asker(fb, t, f), relevance=graded(fb, t, doc, f, "unit"), history=history)
    for first, then in zip(*[iter(rng.sample(numeric, 6))] * 2):
        doc = d[f"{short}.field.{then.name}"]
        history = [("user", f"What unit is {first.name} in?"), ("assistant", f"{first.spec(t).unit} [1].")]
        fb.ask(f"followup-{short}-unit-{then.name.lower()}-after-{first.name.lower()}", f"What about {then.name}?",
               then.spec(t).unit, [(doc, "unit")], who["clinical"] if then.system == "lab" else who["lead"],
               relevance=graded(fb, t, doc, then, "unit"), history=history)
