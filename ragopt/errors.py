"""Every error ragopt raises on purpose, in three families, so a caller catches exactly what it means:

- `InputError`: bad input (a file, flag, config value or request field); it names the file, line and field,
  and the CLI prints it as one line and exits 2.
- `Refused`: a request turned away under load or over a budget, before or instead of the work; serve
  answers it with 429 or 503 and a Retry-After.
- `BackendError`: a model or a server failed (refused the connection, answered an error, broke a stream,
  could not take the prompt).

A programming error (a stage wired wrongly in code, a negative count) stays a plain ValueError/TypeError.
"""

from __future__ import annotations

from pathlib import Path


class RagoptError(Exception):
    """The root of the three families."""


class InputError(RagoptError, ValueError):
    """Bad input. Also a ValueError, so a pydantic validator that raises it gives a validation error."""

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None, field: str | None = None):
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or ""
        if self.line is not None:
            where += f":{self.line}"
        if self.field:
            where += f" [{self.field}]" if where else f"[{self.field}]"
        return f"{where}: {self.message}" if where else self.message


class BadRequest(InputError):
    """A request ragopt cannot honour (serve answers 400 naming `field`), e.g. `n` > 1 or a non-text content part;
    `code` says how, in OpenAI's words ("invalid_value", "unsupported_value", "unsupported_parameter")."""

    def __init__(self, field: str, message: str, code: str = "invalid_value"):
        super().__init__(message, field=field)
        self.code = code

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class TenantRequired(InputError):
    """A query without a tenant against an index that holds tenant data: an error, never "everything"."""

    def __init__(self) -> None:
        super().__init__("this index holds tenant data: the query must name its tenant", field="tenant")


class WiringError(InputError):
    """A pipeline whose stages do not fit together; raised when it is built, never mid-request."""


class BadFile(InputError):
    """Raised by a document loader for its file (or one page, where it can go on without it)."""

    def __init__(self, reason: str, page: int | None = None):
        super().__init__(reason)
        self.reason, self.page = reason, page


class DuplicateKey(InputError):
    """A JSON object that names one key twice (the reader turns it into an error naming the line)."""


class AnswerMetricsUnavailable(InputError):
    """Answer metrics were asked for, but ragas (or one of its string libraries) is not installed."""


class Refused(RagoptError):
    """A request turned away before any work (or before the model): `status` 429 (rate limit, quota, a full
    queue) or 503, with the seconds after which a retry may succeed; `reason` is a short label for metrics
    ("key", "queue_full", ...), str(exc) the sentence for the client."""

    default_status = 429

    def __init__(self, message: str, retry_after_s: float = 1.0, status: int | None = None, reason: str = "refused"):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.status = status if status is not None else self.default_status
        self.reason = reason


class SlotRefused(Refused):
    """The serve scheduler has no slot for this request: 429 (queue full or waited too long) or 503 (its
    deadline cannot be met)."""


class AdmissionError(Refused):
    """A request whose KV cache would not fit the configured budget: refused up front, never an OOM."""

    default_status = 503


class QueueTimeout(Refused):
    """The model stayed busy past the request's deadline or queue timeout."""

    default_status = 503


class Overloaded(Refused):
    """Too many requests already wait for the model."""

    default_status = 503


class BackendError(RagoptError):
    """A model or a server failed: refused the connection, answered an error, or broke the stream mid-answer."""


class BreakerOpen(BackendError):
    """The backend failed repeatedly; calls are refused until its breaker half-opens."""


class ToolUnavailable(BackendError):
    """A tool (ragopt.backends.tools) gave no result: `cause` is what a trace says, "tool_timeout", "tool_error",
    "tool_connection" or "tool_breaker_open" (the tool is unwell), "tool_busy" or "tool_deadline" (it is not)."""

    def __init__(self, cause: str, message: str):
        self.cause = cause
        super().__init__(f"{cause}: {message}")


class ContextOverflow(BackendError):
    """The prompt and the tokens to generate do not fit the model's context."""


class ChildServerError(BackendError, RuntimeError):
    """A server started as a child process (ragopt.backends.child_server) exited before its health URL answered, or
    did not answer in time; the message ends with its log's tail."""
