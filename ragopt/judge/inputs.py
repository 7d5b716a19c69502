"""`ragopt judge --input FILE.jsonl`: one answer per line, `{"id", "question", "passages": [text, ...],
"answer", "reference"?}`, every line checked before any verdict (a bad one is an InputError naming file
and line). A passage may also be an object with "text" (and "title"), as in ../shared/data's sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ragopt.errors import InputError
from ragopt.judge.judging import JudgeItem


def _passage(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return " ".join(x for x in (value.get("title"), value["text"]) if isinstance(x, str) and x)
    return None


def parse_item(data: Any) -> JudgeItem:
    """One line's object as a JudgeItem; ValueError saying what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    for name in ("id", "question", "passages", "answer"):
        if name not in data:
            raise ValueError(f'missing "{name}"')
    if not isinstance(data["id"], (str, int)) or isinstance(data["id"], bool):
        raise ValueError('"id" must be a string or an integer')
    for name in ("question", "answer"):
        if not isinstance(data[name], str):
            raise ValueError(f'"{name}" must be a string')
    passages = data["passages"]
    if not isinstance(passages, list) or not passages:
        raise ValueError('"passages" must be a non-empty list of texts')
    texts = [_passage(p) for p in passages]
    if any(t is None for t in texts):
        raise ValueError('each of "passages" must be a text (or an object with "text")')
    reference = data.get("reference")
    if reference is not None and not isinstance(reference, str):
        raise ValueError('"reference" must be a string when given')
    return JudgeItem(id=str(data["id"]), question=data["question"], passages=tuple(t for t in texts if t is not None),
                     answer=data["answer"], reference=reference or None)


def load_items(path: str | Path) -> list[JudgeItem]:
    p = Path(path)
    if not p.is_file():
        raise InputError("input file not found", path=p, field="--input")
    items: list[JudgeItem] = []
    seen: dict[str, int] = {}
    with p.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                item = parse_item(json.loads(line))
            except (json.JSONDecodeError, ValueError) as exc:
                raise InputError(str(exc), path=p, line=number) from None
            if item.id in seen:
                raise InputError(f"id {item.id!r} already used on line {seen[item.id]}", path=p, line=number)
            seen[item.id] = number
            items.append(item)
    if not items:
        raise InputError("no answers to judge", path=p)
    return items
