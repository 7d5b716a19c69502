"""When trace export is on, and a bad endpoint, header, protocol or a missing SDK as one line naming the variable
or flag (exit 2 at start, before any work)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ragopt.cli import main
from ragopt.errors import InputError
from ragopt.observe.settings import otlp_settings

pytest.importorskip("opentelemetry.sdk")


def test_off_unless_an_endpoint_is_given_or_when_the_sdk_is_disabled() -> None:
    assert otlp_settings(None, False, "serve", {}) is None
    assert otlp_settings("http://127.0.0.1:4318", False, "serve", {"OTEL_SDK_DISABLED": "true"}) is None
    assert otlp_settings(None, False, "serve", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318",
                                                "OTEL_SDK_DISABLED": "TRUE"}) is None


def test_endpoints_headers_and_names_as_the_otel_exporters_read_them() -> None:
    base = otlp_settings(None, False, "serve", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318/",
                                                "OTEL_EXPORTER_OTLP_HEADERS": "x-mlflow-experiment-id=3, Authorization=Bearer%20k"})
    assert base.endpoint == "http://h:4318/v1/traces" and base.service_name == "ragopt-serve" and not base.content
    assert base.headers == {"x-mlflow-experiment-id": "3", "authorization": "Bearer k"}
    given = otlp_settings(None, False, "ask", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://h/custom",
                                               "OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:1",
                                               "OTEL_SERVICE_NAME": "rag", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    assert given.endpoint == "https://h/custom" and given.service_name == "rag" and given.content
    flag = otlp_settings("http://h:6006", True, "eval", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:1"})
    assert flag.endpoint == "http://h:6006/v1/traces" and flag.source == "--otlp" and flag.content


@pytest.mark.parametrize("env, flag, named", [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, None, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:99999/v1/traces"}, None, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ({}, "ftp://h/", "--otlp"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_EXPORTER_OTLP_HEADERS": "x-id"}, None, "OTEL_EXPORTER_OTLP_HEADERS"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_EXPORTER_OTLP_HEADERS": "bad key=1"}, None, "OTEL_EXPORTER_OTLP_HEADERS"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, None, "OTEL_EXPORTER_OTLP_PROTOCOL"),
])
def test_a_bad_value_names_its_variable_or_flag(env: dict[str, str], flag: str | None, named: str) -> None:
    with pytest.raises(InputError) as err:
        otlp_settings(flag, False, "serve", env)
    assert err.value.field == named


def test_trace_content_without_an_endpoint_is_refused() -> None:
    with pytest.raises(InputError, match="OTLP endpoint"):
        otlp_settings(None, True, "serve", {})


def test_serve_with_a_bad_header_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str], tiny_beir: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text('{"k": {"tenant": "t"}}', encoding="utf-8")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-mlflow-experiment-id")
    assert main(["--workspace", str(tmp_path / "ws"), "serve", "--dataset", str(tiny_beir), "--api-keys", str(keys),
                 "--engine", "extractive"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[OTEL_EXPORTER_OTLP_HEADERS]" in err[0]
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").iterdir())  # refused before any work


def test_without_the_sdk_asking_for_export_names_the_extra(tiny_beir: Path, tmp_path: Path) -> None:
    """The SDK hidden from the import system (an injected fault): one line naming what to install, exit 2."""
    code = ("import sys; sys.modules['opentelemetry.sdk'] = None; from ragopt.cli import main; "
            f"sys.exit(main(['--workspace', {str(tmp_path)!r}, 'eval', '--dataset', {str(tiny_beir)!r}, "
            "'--otlp', 'http://127.0.0.1:4318']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'ragopt[observe]'" in lines[0] and "[--otlp]" in lines[0]
