"""What a load test sends: the load (Poisson rate or closed-loop clients, or one of those per tenant), the
questions (built in, a file, or an evaluation set's) and the limits; every flag and file checked before a
request is sent."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from ragopt.config import StrictModel
from ragopt.errors import InputError

SHORT_QUESTIONS = (
    "What causes ocean tides?",
    "What makes bread dough rise?",
    "Who lays the eggs in a bee hive?",
    "How does a vaccine work?",
    "What is a black hole?",
    "How do glaciers form?",
)
LONG_PREAMBLE = (
    "I am preparing a detailed briefing for a group of students and I want to be sure that every statement is "
    "supported by the sources, so please read the passages carefully, compare what they say, point out any "
    "disagreement between them, and explain the mechanism step by step in plain language before answering. "
)


@dataclass(frozen=True)
class TenantLoad:
    """One tenant's load in a multi-tenant run: its API key, its Poisson rate or its closed-loop clients, its
    own questions (None: the run's), and the weight its service is divided by for Jain's index."""

    name: str
    api_key: str
    rate: float | None = None
    concurrency: int | None = None
    questions: tuple[str, ...] | None = None
    weight: float = 1.0

    def check(self, where: str) -> None:
        if (self.rate is None) == (self.concurrency is None):
            raise InputError(f"tenant {self.name!r}: give exactly one of rate and concurrency", field=where)
        if (self.rate is not None and self.rate <= 0) or (self.concurrency is not None and self.concurrency < 1):
            raise InputError(f"tenant {self.name!r}: rate must be > 0 and concurrency >= 1", field=where)
        if self.weight <= 0:
            raise InputError(f"tenant {self.name!r}: weight must be > 0, got {self.weight}", field=where)
        if self.questions is not None and not self.questions:
            raise InputError(f"tenant {self.name!r}: no questions", field=where)


@dataclass(frozen=True)
class LoadSpec:
    url: str
    api_keys: tuple[str, ...]
    duration_s: float
    rate: float | None = None  # Poisson arrivals per second (open loop)
    concurrency: int | None = None  # closed-loop clients
    max_requests: int | None = None
    long_fraction: float = 0.3
    questions: tuple[str, ...] = SHORT_QUESTIONS
    timeout_s: float = 60.0
    stream: bool = True
    seed: int = 0
    tenants: tuple[TenantLoad, ...] = ()  # several tenants' loads at once (then rate and concurrency stay None)

    def check(self) -> None:
        """Everything, for a run at a given load."""
        for t in self.tenants:
            t.check("--tenant")
        if len({t.name for t in self.tenants}) < len(self.tenants):
            raise InputError("tenant names must differ", field="--tenant")
        if self.tenants and (self.rate is not None or self.concurrency is not None):
            raise InputError("--rate and --concurrency are per tenant with --tenant", field="--rate")
        if not self.tenants and (self.rate is None) == (self.concurrency is None):
            raise InputError("give exactly one of --rate and --concurrency", field="--rate")
        if self.rate is not None and self.rate <= 0:
            raise InputError(f"must be > 0, got {self.rate}", field="--rate")
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError(f"must be >= 1, got {self.concurrency}", field="--concurrency")
        self.check_common()

    def check_common(self) -> None:
        """All but the load itself (a capacity search sets the rate)."""
        if self.duration_s <= 0:
            raise InputError(f"must be > 0, got {self.duration_s}", field="--duration")
        if self.max_requests is not None and self.max_requests < 1:
            raise InputError(f"must be >= 1, got {self.max_requests}", field="--max-requests")
        if not 0 <= self.long_fraction <= 1:
            raise InputError(f"must be within 0..1, got {self.long_fraction}", field="--long-fraction")
        if self.timeout_s <= 0:
            raise InputError(f"must be > 0, got {self.timeout_s}", field="--timeout")
        if not self.url.startswith(("http://", "https://")):
            raise InputError(f"must be an http(s) URL, got {self.url!r}", field="--url")
        if not self.api_keys and not self.tenants:
            raise InputError("at least one API key is needed", field="--api-key")


def read_questions(path: str | Path, flag: str) -> tuple[str, ...]:
    """A text file of questions, one per line."""
    try:
        questions = tuple(q.strip() for q in Path(path).read_text(encoding="utf-8").splitlines() if q.strip())
    except (FileNotFoundError, IsADirectoryError):
        raise InputError("file not found", path=path, field=flag) from None
    if not questions:
        raise InputError("no questions in the file", path=path, field=flag)
    return questions


def tenant_flag(text: str, i: int) -> TenantLoad:
    """--tenant KEY:RATE (Poisson) or KEY:cN (N closed-loop clients); named tenant1, tenant2... in the report."""
    key, sep, load = text.rpartition(":")
    try:
        if not sep or not key:
            raise ValueError
        tenant = (TenantLoad(f"tenant{i + 1}", key, concurrency=int(load[1:])) if load.startswith("c")
                  else TenantLoad(f"tenant{i + 1}", key, rate=float(load)))
    except ValueError:
        raise InputError(f"expected KEY:RATE or KEY:cN, got {text!r}", field="--tenant") from None
    tenant.check("--tenant")
    return tenant


class _TenantEntry(StrictModel):
    name: str = Field(min_length=1)
    api_key: str = Field(min_length=1)
    rate: float | None = Field(None, gt=0)
    concurrency: int | None = Field(None, ge=1)
    questions: str | None = None
    weight: float = Field(1.0, gt=0)


def read_tenants(path: str | Path) -> tuple[TenantLoad, ...]:
    """--tenants FILE: [[tenant]] tables of name, api_key, rate or concurrency, questions (a file beside it), weight."""
    import tomllib

    from pydantic import ValidationError

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError):
        raise InputError("file not found", path=path, field="--tenants") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"invalid TOML: {exc}", path=path, field="--tenants") from None
    rows = data.get("tenant")
    if set(data) - {"tenant"} or not isinstance(rows, list) or not rows:
        raise InputError("expected [[tenant]] tables and nothing else", path=path, field="--tenants")
    out = []
    for i, row in enumerate(rows):
        try:
            entry = _TenantEntry.model_validate(row)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InputError(f"tenant {i + 1}: {where}: {first['msg']}", path=path, field="--tenants") from None
        questions = read_questions(Path(path).parent / entry.questions, "--tenants") if entry.questions else None
        tenant = TenantLoad(entry.name, entry.api_key, entry.rate, entry.concurrency, questions, entry.weight)
        try:
            tenant.check("--tenants")
        except InputError as exc:
            raise InputError(exc.message, path=path, field="--tenants") from None
        out.append(tenant)
    return tuple(out)
