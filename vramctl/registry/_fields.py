"""Typed access to fields of a parsed config / profile: each failure names the file and the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramctl.core.errors import BadInputError

_MISSING = object()


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def get_int(
    data: Mapping[str, Any],
    key: str,
    where: str,
    *,
    default: Any = _MISSING,
    minimum: int = 1,
    maximum: int | None = None,
) -> int:
    """An integer field in [minimum, maximum] (bools and floats with a fraction are rejected)."""
    value = data.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise BadInputError(f"{where}: missing required field {key!r}")
        return int(default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInputError(f"{where}: field {key!r} must be an integer, got {_describe(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise BadInputError(f"{where}: field {key!r} must be an integer, got {value!r}")
        value = int(value)
    if value < minimum:
        kind = "positive" if minimum == 1 else f">= {minimum}"
        raise BadInputError(f"{where}: field {key!r} must be {kind}, got {value}")
    if maximum is not None and value > maximum:
        raise BadInputError(f"{where}: field {key!r} is implausibly large ({value} > {maximum})")
    return int(value)


def get_opt_int(data: Mapping[str, Any], key: str, where: str, *, minimum: int = 1) -> int | None:
    if data.get(key) is None:
        return None
    return get_int(data, key, where, minimum=minimum)


def get_float(data: Mapping[str, Any], key: str, where: str, *, default: Any = _MISSING) -> float:
    """A non-negative finite number."""
    value = data.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise BadInputError(f"{where}: missing required field {key!r}")
        return float(default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadInputError(f"{where}: field {key!r} must be a number, got {_describe(value)}")
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise BadInputError(f"{where}: field {key!r} must be a non-negative number, got {value}")
    return float(value)


def get_bool(data: Mapping[str, Any], key: str, where: str, *, default: bool = False) -> bool:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadInputError(f"{where}: field {key!r} must be true or false, got {_describe(value)}")
    return value


def get_str(data: Mapping[str, Any], key: str, where: str, *, default: Any = _MISSING) -> str:
    value = data.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise BadInputError(f"{where}: missing required field {key!r}")
        return str(default)
    if not isinstance(value, str) or not value.strip():
        raise BadInputError(f"{where}: field {key!r} must be a non-empty string, got {_describe(value)}")
    return value


def get_str_list(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(item, str | int | float) for item in value):
        raise BadInputError(f"{where}: field {key!r} must be a list of strings, got {_describe(value)}")
    return tuple(str(item) for item in value)


def get_mapping(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadInputError(f"{where}: field {key!r} must be a mapping, got {_describe(value)}")
    return value


def get_sources(data: Mapping[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    """`sources:` as a {fact: source} mapping → sorted (fact, source) pairs."""
    raw = get_mapping(data, "sources", where) or {}
    pairs: list[tuple[str, str]] = []
    for fact, source in raw.items():
        if not isinstance(source, str | int | float):
            raise BadInputError(f"{where}: sources.{fact} must be a string, got {_describe(source)}")
        pairs.append((str(fact), str(source)))
    return tuple(pairs)
