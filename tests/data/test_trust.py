"""The trust-check line printed beside a generated set's figures (ragopt/data/trust.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragopt.data import generated_note, trust


def test_the_line_gives_the_measured_range_of_the_arm_the_set_was_made_with(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trust, "MEASURED", {
        "plain": {"kendall_tau": {"a": 0.41, "b": 0.72}, "configurations": 20, "date": "d", "command": "c"},
        "like": {"kendall_tau": {"a": 0.66, "b": 0.81, "c": 0.7}, "configurations": 20, "date": "d", "command": "c"}})
    assert ("with --like): Kendall tau 0.66 to 0.81 against people's judgements over 20 configurations on 3 labelled "
            "collections (a, b, c;") in trust.trust_line(True)
    assert "without --like): Kendall tau 0.41 to 0.72" in trust.trust_line(False)
    monkeypatch.setattr(trust, "MEASURED", {"plain": None, "like": None})
    assert "not measured on full labelled sets yet" in trust.trust_line(True) and "--check-against LABELLED_SET" in trust.trust_line(True)


def test_a_generated_sets_note_carries_the_line(tmp_path: Path) -> None:
    record = {"generator": "extractive", "seed": 0, "filters": {"round_trip": {"enabled": False}}, "like": {"examples": 30}}
    (tmp_path / "synth.json").write_text(json.dumps(record), encoding="utf-8")
    note = generated_note(tmp_path)
    assert note is not None and note.endswith(trust.trust_line(True))
    (tmp_path / "synth.json").write_text(json.dumps({k: v for k, v in record.items() if k != "like"}), encoding="utf-8")
    assert str(generated_note(tmp_path)).endswith(trust.trust_line(False))
