"""The hospital world's facts: the dataclasses the templates render, loaded from the JSON files in data/ (the two
hospitals, their teams, field dictionaries, tables, jobs, known errors, runbooks, policies, glossary, cohort and
reference pages, question templates). The facts are data; the code that renders them lives in render.py and ask.py.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Tenant:
    id: str
    short: str
    name: str
    lab: str  # laboratory information system
    emr: str  # medical records system
    lab_dictionary: str  # the current field dictionary release of the lab system
    emr_dictionary: str
    warehouse: str
    scheduler: str
    trigger: str  # how to start a job by hand; {job} is the job name
    ticket: str  # ticket prefix
    oncall: str  # on-call chat channel
    dq_channel: str
    secrets: str  # secret store path prefix
    pager: str  # the out-of-hours data on-call
    status_page: str

    def table(self, area: str, name: str) -> str:
        """Where a job lands its data: north has one schema, south one schema per area."""
        return f"ndw.{name}" if self.short == "north" else f"sdw.{area}.{name}"


@dataclass(frozen=True)
class Asker:
    """Who asks: a tenant and the permission scopes that person holds."""

    tenant: Tenant
    scopes: tuple[str, ...]


def askers(t: Tenant) -> dict[str, Asker]:
    return {
        "clinical": Asker(t, ("clinical",)),
        "ops": Asker(t, ("ops",)),
        "finance": Asker(t, ("finance",)),
        "lead": Asker(t, ("clinical", "ops")),
    }


@dataclass(frozen=True)
class Team:
    name: str
    owns: str
    channel: str
    hours: str
    manager: str
    pager: str


@dataclass(frozen=True)
class Spec:
    """One hospital's definition of a field. An empty unit marks a code, identifier or timestamp field."""

    unit: str
    valid: str  # valid range (numeric fields) or valid values (the others)
    dtype: str
    table: str
    meaning: str = ""  # overrides the shared meaning where the hospitals differ
    note: str = ""


@dataclass(frozen=True)
class Field:
    name: str
    system: str  # "lab", "emr" or "billing"
    meaning: str
    north: Spec
    south: Spec

    def spec(self, t: Tenant) -> Spec:
        return self.north if t is NORTH else self.south


@dataclass(frozen=True)
class Superseded:
    """A field definition from an older dictionary release, kept online as a deprecated page."""

    field: str
    tenant: Tenant
    unit: str
    valid: str
    dtype: str
    factor: str  # how to convert an old value to the current unit


@dataclass(frozen=True)
class Job:
    name: str
    area: str  # a key of TEAMS: who owns it; also the south warehouse schema
    purpose: str
    target: str  # warehouse table name
    tables: tuple[str, ...]  # source tables it loads
    north: tuple[str, str] | None  # (cron, in words), or None where the hospital has no such job
    south: tuple[str, str] | None

    def schedule(self, t: Tenant) -> tuple[str, str] | None:
        return self.north if t is NORTH else self.south


@dataclass(frozen=True)
class KnownError:
    code: str
    tenant: Tenant
    job: str
    error: str  # as it appears in the job log
    symptom: str
    cause: str
    fix: str
    answer: str  # the part of the fix a short reference answer quotes
    prevention: str


@dataclass(frozen=True)
class Step:
    """One step or paragraph, a template over the runbook's parameters. `only` limits it to one hospital."""

    text: str
    question: str = ""
    answer: str = ""
    only: str = ""


def step(text: str, question: str = "", answer: str = "", only: str = "") -> Step:
    return Step(text, question, answer, only)


@dataclass(frozen=True)
class Runbook:
    slug: str
    title: str
    area: str  # the owning team (a key of TEAMS); shared runbooks belong to the group data office
    scopes: tuple[str, ...]
    purpose: str
    background: str
    triggers: list[str]
    prerequisites: list[str]
    steps: list[Step]
    checks: list[Step]
    rollback: list[Step]
    pitfalls: list[Step]
    params: dict[str, dict[str, str]]  # "north"/"south"/"shared" -> template values


@dataclass(frozen=True)
class Policy:
    slug: str
    title: str
    tenant: Tenant | None  # None: a group policy, shared by both hospitals
    scopes: tuple[str, ...]
    owner: str
    purpose: str
    sections: list[tuple[str, list[Step]]]


@dataclass(frozen=True)
class Page:
    """A page both hospitals keep, with the same sections and different values."""

    kind: str
    slug: str
    title: str
    scopes: tuple[str, ...]
    purpose: str
    sections: list[tuple[str, list[Step]]]  # templates over the hospital's values below and its team names
    values: dict[str, dict[str, str]]


def _json(name: str) -> Any:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def _decode(hint: Any, value: Any) -> Any:
    """A JSON value as the annotated type: dataclasses by their fields' annotations, tuples, a tenant by its short name."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Tenant:
        return TENANT[value]
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{k: _decode(hints[k], v) for k, v in value.items()})
    if origin in (typing.Union, types.UnionType):
        return None if value is None else _decode(next(a for a in args if a is not type(None)), value)
    if origin is tuple:
        items = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        return tuple(_decode(a, v) for a, v in zip(items, value))
    if origin is list:
        return [_decode(args[0], v) for v in value]
    if origin is dict:
        return {k: _decode(args[1], v) for k, v in value.items()}
    return value


def _tuples(value: Any) -> Any:
    """JSON lists back as the tuples the tables were written with."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _by_pair(nested: dict[str, dict[str, str]]) -> dict[tuple[str, str], str]:
    return {(hospital, area): text for hospital, areas in nested.items() for area, text in areas.items()}


TENANTS = tuple(Tenant(**t) for t in _json("tenants"))
NORTH, SOUTH = TENANTS
TENANT = {t.short: t for t in TENANTS}
_teams = _json("teams")
GROUP_TEAM = Team(**_teams.pop("group"))
TEAMS: dict[str, dict[str, Team]] = _decode(dict[str, dict[str, Team]], _teams)
FIELDS = _decode(list[Field], _json("fields"))
FIELD = {f.name: f for f in FIELDS}
SUPERSEDED = _decode(list[Superseded], _json("superseded"))
_warehouse = _json("warehouse")
SYSTEM_SCOPES = _tuples(_warehouse["system_scopes"])
OLD_RELEASE = _tuples(_warehouse["old_release"])
TABLES = _tuples(_warehouse["tables"])  # source table -> what a row is, its key, and rows per day in (north, south)
SERVICE_LEVELS = _by_pair(_warehouse["service_levels"])  # (hospital, area) -> what a job of that area promises
SOURCES = _by_pair(_warehouse["sources"])  # (hospital, area) -> where a job of that area reads from
UPSTREAM = _tuples(_warehouse["upstream"])  # job -> jobs whose data it needs first
SYSTEMS = _tuples(_warehouse["systems"])  # what a runbook's "Systems involved" section lists, per hospital
REVISION_AUTHORS = _tuples(_warehouse["revision_authors"])
REVISION_NOTES = _tuples(_warehouse["revision_notes"])
JOBS = _decode(list[Job], _json("jobs"))
JOB = {j.name: j for j in JOBS}
TABLE_JOB = {table: job for job in JOBS for table in job.tables}
KNOWN_ERRORS = _decode(list[KnownError], _json("known_errors"))
RUNBOOKS = _decode(list[Runbook], _json("runbooks"))
POLICIES = _decode(list[Policy], _json("policies"))
GLOSSARY = [tuple(entry) for entry in _json("glossary")]
_pages = _json("pages")
COHORTS = _decode(list[Page], _pages["cohorts"])
REFERENCE_PAGES = _decode(list[Page], _pages["reference"])
_questions = _json("questions")
UNIT_QUESTIONS = tuple(_questions["unit"])
RANGE_QUESTIONS = tuple(_questions["range"])
VALUES_QUESTIONS = tuple(_questions["values"])
SCHEDULE_QUESTIONS = tuple(_questions["schedule"])
ERROR_QUESTIONS = tuple(_questions["error"])
ALWAYS_ASKED_UNITS = tuple(_questions["always_asked_units"])
