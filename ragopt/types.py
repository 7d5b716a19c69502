"""The data that flows down a pipeline: documents, chunks, queries, hits and answers."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Stored in place of "no tenant" / "no scope" so that shared data matches every query (see `visible_to`).
EVERYONE = "*"


def _as_sorted_tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    scopes = tuple(sorted({str(v) for v in value}))
    if EVERYONE in scopes:
        raise ValueError(f"{EVERYONE!r} is reserved for shared data and cannot be a scope")
    return scopes


def _real_tenant(value: Any) -> Any:
    if value == EVERYONE:
        raise ValueError(f"{EVERYONE!r} is reserved for shared data and cannot be a tenant; use None")
    return value


class Document(BaseModel):
    """A source document. `tenant` None means shared by all tenants; empty `scopes` means any scope."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    tenant: str | None = None
    scopes: tuple[str, ...] = ()

    _norm_scopes = field_validator("scopes", mode="before")(_as_sorted_tuple)
    _check_tenant = field_validator("tenant", mode="before")(_real_tenant)

    @classmethod
    def from_langchain(cls, doc: Any, id_key: str = "id") -> "Document":
        """Accept a `langchain_core.documents.Document`; its id, tenant and scopes may live in metadata."""
        metadata = dict(doc.metadata or {})
        doc_id = getattr(doc, "id", None) or metadata.pop(id_key, None)
        if doc_id is None:
            doc_id = hashlib.sha256(doc.page_content.encode()).hexdigest()[:16]
        return cls(
            id=str(doc_id),
            text=doc.page_content,
            title=str(metadata.pop("title", "")),
            tenant=metadata.pop("tenant", None),
            scopes=metadata.pop("scopes", ()),
            metadata=metadata,
        )


class Chunk(BaseModel):
    """A slice `text[start:end]` of one document's text, with that document's title, tenant and scopes."""

    model_config = ConfigDict(frozen=True)

    id: str
    doc_id: str
    start: int
    end: int
    text: str
    title: str = ""
    tenant: str | None = None
    scopes: tuple[str, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)
    # what the retrievers read before the text (ChunkerConfig.headers): None is the title, "" nothing
    header: str | None = None

    @property
    def indexed_text(self) -> str:
        """What the retrievers see: the title (or the heading path) gives a short chunk the context it lost when
        cut out."""
        header = self.title if self.header is None else self.header
        return f"{header} {self.text}" if header else self.text

    @staticmethod
    def make_id(doc_id: str, start: int, end: int, chunker_fingerprint: str) -> str:
        raw = f"{doc_id}\x1f{start}\x1f{end}\x1f{chunker_fingerprint}"
        return hashlib.sha256(raw.encode()).hexdigest()[:24]


class Turn(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: str


class Sampling(BaseModel):
    """What one request asks of the generator (an OpenAI-style request's options), applied within the plan's own
    settings by `CompletionConfig.for_request`: a lower output budget, never a higher one. Every field is part of
    the answer cache's key (serve keys on the whole model)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0, le=2)
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_p: float | None = Field(None, ge=0, le=1)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: tuple[tuple[int, float], ...] = Field((), description="(token id, bias in [-100, 100]), by token id")

    @field_validator("logit_bias")
    @classmethod
    def _by_token(cls, value: tuple[tuple[int, float], ...]) -> tuple[tuple[int, float], ...]:
        if any(token < 0 or not -100 <= bias <= 100 for token, bias in value):
            raise ValueError("logit_bias maps token ids (>= 0) to biases from -100 to 100")
        return tuple(sorted(value))

    def asked(self) -> list[str]:
        """The fields that ask for more than a deterministic answer already gives (greedy, unbiased, no penalty):
        what a generator must honour or refuse. A seed, temperature 0 or top_p 1 ask for nothing more."""
        neutral = {"temperature": 0, "top_p": 1, "frequency_penalty": 0, "presence_penalty": 0}
        return [name for name, value in self if value not in (None, (), neutral.get(name, ())) and name != "seed"]


class Query(BaseModel):
    """What the user asked, and who asked it: retrieval only ever sees what `tenant` and `scopes` allow."""

    text: str
    id: str = ""
    tenant: str | None = None
    scopes: tuple[str, ...] = ()
    history: list[Turn] = Field(default_factory=list)
    instructions: str = Field("", description="the asker's own instructions (a chat's system and developer messages): "
                              "the prompt's system part, after the plan's; never summarized nor trimmed")

    _norm_scopes = field_validator("scopes", mode="before")(_as_sorted_tuple)
    _check_tenant = field_validator("tenant", mode="before")(_real_tenant)


def visible_to(tenant: str | None, scopes: tuple[str, ...], query: Query) -> bool:
    """The one permission rule for data owned by (tenant, scopes): the query's tenant (or shared data),
    and a scope in common with the query (or unscoped data)."""
    tenant_ok = tenant is None or tenant == query.tenant
    scope_ok = not scopes or bool(set(scopes) & set(query.scopes))
    return tenant_ok and scope_ok


LIVE_DOC_PREFIX = "live:"  # the doc_id of a tool's live passage: "live:TOOL"


def is_live(chunk: "Chunk") -> bool:
    """A passage of live data a tool read (ragopt.stages.tool), not a document: rankings, retrieval metrics and
    caches leave it out."""
    return chunk.metadata.get("live") is True


class Hit(BaseModel):
    chunk: Chunk
    score: float
    rank: int  # 1-based
    retriever: str


def source_label(metadata: dict[str, Any]) -> str | None:
    """Where a loaded document's text came from, as a citation names it: `guide.pdf, page 2` or
    `guide.md > Setup > Linux` (metadata "source", "page", "headings"; see ragopt.documents); None without."""
    source = metadata.get("source")
    if not source:
        return None
    label = str(source)
    if metadata.get("page") is not None:
        label += f", page {metadata['page']}"
    headings = metadata.get("headings")
    if isinstance(headings, list) and headings:
        label += " > " + " > ".join(str(h) for h in headings)
    return label


class Citation(BaseModel):
    """A `[n]` marker in an answer, resolved to the passage it names; `valid` is False when no passage n was given.
    `source` names the file (and page) the passage came from, for documents loaded from files."""

    marker: int
    chunk_id: str | None = None
    doc_id: str | None = None
    valid: bool = True
    source: str | None = None


class Answer(BaseModel):
    text: str
    citations: list[Citation] = Field(default_factory=list)
    incomplete: bool = False
    finish_reason: str = "stop"
    generator: str = ""
