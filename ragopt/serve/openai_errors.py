"""OpenAI's error body, which every 4xx/5xx of `/v1/*` answers with, so that OpenAI's clients read it as they read
OpenAI's own (the openai SDK's `BadRequestError.param`, `.code`, `.type`):

    {"error": {"message": "...", "type": "invalid_request_error", "param": "n", "code": "unsupported_value"}}

`type` is the family (invalid_request_error, authentication_error, rate_limit_error, insufficient_quota,
service_unavailable_error, server_error), `param` the request field at fault (dotted: `messages.1.role`) or null,
`code` what exactly went wrong, or null. A malformed body is a 400 (FastAPI's own would be 422), its `param` the
first field pydantic names.
"""

from __future__ import annotations

from typing import Any

from ragopt.errors import BadRequest, Refused

INVALID = "invalid_request_error"

# pydantic's error types -> OpenAI's codes for a body field
_CODES = {
    "missing": "missing_required_parameter",
    "extra_forbidden": "unknown_parameter",
    "json_invalid": "invalid_json",
    "model_attributes_type": "invalid_type",
    "dict_type": "invalid_type",
    "list_type": "invalid_type",
    "string_type": "invalid_type",
    "int_type": "invalid_type",
    "int_parsing": "invalid_type",
    "float_type": "invalid_type",
    "float_parsing": "invalid_type",
    "bool_type": "invalid_type",
    "bool_parsing": "invalid_type",
    "literal_error": "invalid_value",
    "too_short": "invalid_value",
    "too_long": "invalid_value",
}
# a refusal's reason -> its code; other reasons are their own code
_RATE_LIMITS = {"key": "rate_limit_exceeded", "tenant": "rate_limit_exceeded", "quota": "insufficient_quota"}


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def invalid_body(errors: list[Any]) -> dict[str, Any]:
    """The 400 for a body FastAPI could not validate: the first error, its field as `param`."""
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    kind = str(first.get("type", ""))
    param = None if kind == "json_invalid" or not loc else ".".join(loc)
    message = first.get("msg", "invalid body")
    return error_body(f"{param}: {message}" if param else message, INVALID, param, _CODES.get(kind, "invalid_value"))


def bad_request(exc: BadRequest) -> dict[str, Any]:
    """A field ragopt cannot honour (or a value it refuses), named."""
    return error_body(str(exc), INVALID, exc.field, exc.code)


def refusal(exc: Refused) -> dict[str, Any]:
    """A request turned away under load or over a budget (429 or 503; Retry-After goes beside it)."""
    if exc.reason == "quota":
        type_ = "insufficient_quota"
    else:
        type_ = "rate_limit_error" if exc.status == 429 else "service_unavailable_error"
    return error_body(str(exc), type_, None, _RATE_LIMITS.get(exc.reason, exc.reason))


def by_status(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """An HTTP error with no ragopt exception behind it (401, 404, 405, 413, 500)."""
    type_, code = {401: ("authentication_error", "invalid_api_key"), 404: (INVALID, "unknown_url"),
                   405: (INVALID, "method_not_allowed"), 413: (INVALID, "string_above_max_length")}.get(
        status, (INVALID, None) if status < 500 else ("server_error", None))
    return error_body(message, type_, param, code)
