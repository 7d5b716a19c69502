"""Is trace export switched on, and to where: read from the flag or the standard OpenTelemetry variables and
checked before any work, so a bad endpoint or header is one line naming the variable or flag (exit 2), never a
warning in a background thread while requests are served. Imports nothing heavy."""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import unquote, urlsplit

from ragopt.errors import InputError

INSTALL = "pip install 'ragopt[observe]'"
# What HTTP allows in a header name (RFC 9110 token)
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_TRUE = ("true", "1", "yes", "on")


@dataclass(frozen=True)
class OtlpSettings:
    endpoint: str  # the full traces URL, e.g. http://127.0.0.1:6006/v1/traces
    headers: dict[str, str] = field(default_factory=dict)
    service_name: str = "ragopt"
    content: bool = False  # questions, answers and passages in span attributes (opt-in: they may be personal)
    source: str = ""  # the flag or variable the endpoint came from, for messages


def _flag_true(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in _TRUE


def installed(module: str) -> bool:
    """Importable, without importing it (a dotted name whose parent package is missing counts as missing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def check_url(url: str, source: str) -> str:
    """An http(s) URL with a host (and a numeric port, if any); else one InputError naming `source`."""
    parts = urlsplit(url.strip())
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise InputError(f"expected an http(s) URL such as http://127.0.0.1:4318, got {url!r}", field=source)
    return url.strip()


def parse_headers(value: str, source: str) -> dict[str, str]:
    """'k=v,k2=v2' (values percent-decoded), as the OTLP exporter reads it; a malformed item is an InputError."""
    headers = {}
    for item in value.split(","):
        if not item.strip():
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not _HEADER_NAME.match(name):
            raise InputError(f"expected comma-separated key=value pairs, got {item.strip()!r}", field=source)
        headers[name.lower()] = unquote(raw.strip())
    return headers


def _endpoint(flag: str | None, env: Mapping[str, str]) -> tuple[str, str] | None:
    """(traces URL, where it came from): the flag, else the traces variable as given, else the base variable
    with /v1/traces appended (as the OpenTelemetry exporters do)."""
    if flag:
        url = check_url(flag, "--otlp")
        return (url if urlsplit(url).path.rstrip("/").endswith("/v1/traces") else url.rstrip("/") + "/v1/traces"), "--otlp"
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        if env.get(name, "").strip():
            url = check_url(env[name], name)
            return (url if name.endswith("TRACES_ENDPOINT") else url.rstrip("/") + "/v1/traces"), name
    return None


def otlp_settings(flag: str | None, content: bool, command: str, env: Mapping[str, str] | None = None) -> OtlpSettings | None:
    """The export settings when export is asked for (the flag or an OTLP endpoint variable, and the SDK not
    disabled by OTEL_SDK_DISABLED), else None. Raises InputError for a bad value or a missing SDK."""
    env = os.environ if env is None else env
    if _flag_true(env, "OTEL_SDK_DISABLED"):
        return None
    found = _endpoint(flag, env)
    if found is None:
        if content:
            raise InputError("goes with an OTLP endpoint (--otlp URL or OTEL_EXPORTER_OTLP_ENDPOINT)", field="--trace-content")
        return None
    endpoint, source = found
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    if protocol.strip() != "http/protobuf":
        raise InputError(f"ragopt exports OTLP over HTTP (http/protobuf), got {protocol!r}", field="OTEL_EXPORTER_OTLP_PROTOCOL")
    headers: dict[str, str] = {}
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):  # the traces one wins
        headers.update(parse_headers(env.get(name, ""), name))
    if not all(map(installed, ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"))):
        raise InputError(f"trace export needs the OpenTelemetry SDK and OTLP exporter: {INSTALL}", field=source)
    return OtlpSettings(endpoint=endpoint, headers=headers, service_name=env.get("OTEL_SERVICE_NAME") or f"ragopt-{command}",
                        content=content or _flag_true(env, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"), source=source)
