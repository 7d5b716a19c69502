"""One error family: every exception class ragopt defines lives in ragopt/errors.py, in one of three families
(input, refused, backend), and a runtime refusal is never counted as bad input."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import ragopt
from ragopt import errors

ROOT = Path(ragopt.__file__).parent


def _exception_classes_outside_errors() -> list[str]:
    """Classes whose base names end in Error/Exception/Refused/Timeout (or are one of errors.py's classes)."""
    ours = {name for name, obj in vars(errors).items() if inspect.isclass(obj) and issubclass(obj, BaseException)}
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if any(b.endswith(("Error", "Exception", "Refused", "Timeout")) or b in ours for b in bases):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return found


def test_every_error_class_lives_in_errors_py() -> None:
    assert _exception_classes_outside_errors() == []


def test_each_error_belongs_to_one_family() -> None:
    families = (errors.InputError, errors.Refused, errors.BackendError)
    for name, obj in vars(errors).items():
        if inspect.isclass(obj) and issubclass(obj, errors.RagoptError) and obj not in (errors.RagoptError, *families):
            assert sum(issubclass(obj, f) for f in families) == 1, name


def test_a_refusal_is_not_bad_input() -> None:
    refused = errors.AdmissionError("over the KV budget")
    assert isinstance(refused, errors.Refused) and not isinstance(refused, (errors.InputError, ValueError))
    assert refused.status == 503 and refused.retry_after_s > 0
    assert errors.SlotRefused("queue full", 2.0, 429, "queue_full").reason == "queue_full"
