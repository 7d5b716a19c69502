"""Config models from flag values: a validation error names the flag that set the faulty field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ragopt.errors import InputError

M = TypeVar("M", bound=BaseModel)


def from_flags(config_class: type[M], flags: Mapping[str, str], /, **values: Any) -> M:
    """Build a config from flag values; the first validation error becomes an InputError naming its flag.

    `flags` maps a config field to the flag that sets it; the key "" names the flag blamed for an error of
    the whole model (a rule across fields, such as overlap < size)."""
    try:
        return config_class(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        message = err["msg"].removeprefix("Value error, ")
        if name in values:
            message += f", got {values[name]!r}"
        raise InputError(message, field=flags.get(name, name or None)) from None
