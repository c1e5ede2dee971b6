"""Where the bundled profiles live, and reading YAML / JSON files into plain dicts (errors as BadInputError)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from vramctl.core.errors import BadInputError

LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def profiles_dir() -> Path:
    """`vramctl/profiles` inside an installed wheel, else the repository's `profiles/` (editable install)."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "profiles", package.parent / "profiles"):
        if (candidate / "models").is_dir() and (candidate / "gpus").is_dir():
            return candidate
    raise BadInputError(
        f"bundled profiles not found under {package / 'profiles'} or {package.parent / 'profiles'}"
    )


def read_yaml(path: Path) -> dict[str, Any]:
    """One YAML mapping; a syntax error or a non-mapping document is a BadInputError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise BadInputError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    except ValueError:  # an integer of more than 4,300 digits (Python's int-from-text limit)
        raise BadInputError(
            f"{path}: not valid YAML: a number too long to read (over 4,300 digits)"
        ) from None
    if not isinstance(data, dict):
        raise BadInputError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


MAX_INT_DIGITS = 30
"""No count in a model's config.json or safetensors index has more digits (10^30 parameters); a 4,299-digit integer
would reach the arithmetic (and Python's 4,300-digit str() limit) as an internal error."""


class _IntTooLong(ValueError):
    def __init__(self, digits: int) -> None:
        super().__init__(digits)
        self.digits = digits


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _IntTooLong(digits)
    return int(text)


MAX_JSON_BYTES = 64 << 20
"""config.json files are kilobytes, a safetensors index a few megabytes."""


def read_json_object(path: Path) -> dict[str, Any]:
    """One JSON object; malformed JSON or another top-level type is a BadInputError naming the file."""
    try:
        with path.open("rb") as handle:  # at most 64 MiB: `--model model.bin` must not read 10 GB into memory
            raw = handle.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise BadInputError(
                f"{path}: larger than {MAX_JSON_BYTES >> 20} MiB, not a config.json (give the model's folder "
                "or its config.json)"
            )
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(
            f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
        ) from None
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text, parse_int=_bounded_int)
    except _IntTooLong as exc:
        raise BadInputError(
            f"{path}: a number too long to be a model's field (an integer of {exc.digits:,} digits; none has over "
            f"{MAX_INT_DIGITS})"
        ) from None
    except RecursionError:
        raise BadInputError(f"{path}: JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise BadInputError(
            f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError:  # an integer of more than 4,300 digits (Python's int-from-text limit)
        raise BadInputError(
            f"{path}: not valid JSON: a number too long to read (over 4,300 digits)"
        ) from None
    if not isinstance(data, dict):
        raise BadInputError(f"{path}: expected a JSON object at the top level, got {type(data).__name__}")
    return data
