"""The one reader of results.json: both readers (SweepResults.load and a saved plan's from_results) refuse
another schema version before reading a field, and a plan recorded with an old key names the new one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragopt.errors import InputError
from ragopt.eval.results import SweepResults
from ragopt.plan.results_file import SCHEMA_VERSION, read_results
from ragopt.plan.saved import from_results


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("read", [SweepResults.load, from_results], ids=["SweepResults.load", "from_results"])
def test_another_schema_version_is_refused_by_every_reader(tmp_path: Path, read) -> None:  # type: ignore[no-untyped-def]
    path = _write(tmp_path / "results.json", {"schema_version": SCHEMA_VERSION + 1, "trials": []})
    with pytest.raises(InputError, match=f"schema_version {SCHEMA_VERSION + 1} is not supported") as err:
        read(path)
    assert err.value.field == "schema_version" and err.value.path == str(path)


def test_a_missing_file_or_a_json_list_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="results file not found") as err:
        read_results(tmp_path / "nope.json", flag="--from")
    assert err.value.field == "--from"
    with pytest.raises(InputError, match="not a results.json: a JSON list"):
        read_results(_write(tmp_path / "list.json", [1, 2]))


def test_a_plan_recorded_with_the_old_rrf_constant_key_names_rrf_k(tmp_path: Path) -> None:
    path = _write(tmp_path / "results.json", {"schema_version": 1, "selected": "t", "trials": [
        {"id": "t", "plan": {"retrieval": {"retriever": "hybrid", "fusion": {"k": 60}}}}]})
    with pytest.raises(InputError, match="`k` is now `rrf_k`") as err:
        from_results(path)
    assert err.value.field == "retrieval.fusion" and "\n" not in str(err.value)
