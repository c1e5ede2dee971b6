"""The one place that parses and formats sizes. All sizes inside vramctl are int bytes.

Conventions (matching the engines):
- `GiB`, `MiB`, `KiB`, `TiB` are binary (2**30 ...); `GB`, `MB`, `KB`, `TB` are decimal (10**9 ...).
- A bare one-letter suffix follows vLLM's `--kv-cache-memory-bytes` parser
  (vllm/utils/argparse_utils.py:30-70): lower-case `k/m/g/t` decimal, upper-case `K/M/G/T` binary.
- Thousands separators (`205,728`, `1_000`) are accepted in numbers.
- vLLM's `format_gib` is `round(b / 2**30, 2)` printed with `str()` (vllm/utils/mem_utils.py:30-31).
"""

from __future__ import annotations

import math
import re

from vramctl.core.errors import BadInputError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12

_UNIT_BYTES: dict[str, int] = {
    "": 1,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": TB,
}
# Single-letter suffixes are case-sensitive, as in vLLM: lower = decimal, upper = binary.
_LETTER_BYTES: dict[str, int] = {
    "k": KB,
    "m": MB,
    "g": GB,
    "t": TB,
    "K": KiB,
    "M": MiB,
    "G": GiB,
    "T": TiB,
}

_MANTISSA = r"(?:\d+(?:[,_]\d+)*(?:\.\d+)?|\.\d+)"
"""A number needs digits before its exponent: `e5`, `E9`, `e-5GiB` have none and are not numbers."""
_SIZE_RE = re.compile(rf"^\s*(?P<num>[+-]?{_MANTISSA}(?:[eE][+-]?\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$", re.ASCII)
_NUMBER_RE = re.compile(
    r"^\s*[+-]?(?:(?:\d{1,3}(?:,\d{3})+|\d+(?:_\d+)*)(?:\.\d+)?|\.\d+)(?:[eE][+-]?\d+)?\s*$", re.ASCII
)
_MAX_NUMBER_CHARS = 400
"""No number a user means is longer; past it the text is refused before any conversion (a 4,299-digit integer)."""


def parse_number(text: str, *, what: str = "value") -> float:
    """Parse a plain number, accepting thousands separators (`205,728`) and underscores (`1_000`).

    Everything else is one BadInputError naming `what`: no mantissa (`e5`), `nan`, `inf`, `1e400`, text."""
    raw = text.strip()
    if len(raw) > _MAX_NUMBER_CHARS:
        raise BadInputError(f"{what}: {_short(text)} is not a number (over {_MAX_NUMBER_CHARS} characters)")
    if not raw or not _NUMBER_RE.match(raw):
        raise BadInputError(f"{what}: {text!r} is not a number")
    try:
        value = float(raw.replace(",", "").replace("_", ""))
    except (ValueError, OverflowError):
        raise BadInputError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise BadInputError(f"{what}: {text!r} is not a finite number")
    return value


def as_float(value: object, *, what: str = "value") -> float:
    """A number from a file (YAML / JSON: int, float or text) as a finite float, or one BadInputError.

    A 400-digit integer (too large for a float), `.nan`, `.inf`, a bool or a list are refused, never raised as
    OverflowError / TypeError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInputError(f"{what}: {_short(value)} is not a number")
    if isinstance(value, str):
        return parse_number(value, what=what)
    try:
        number = float(value)
    except OverflowError:
        raise BadInputError(f"{what}: {_short(value)} is absurdly large") from None
    if not math.isfinite(number):
        raise BadInputError(f"{what}: {value!r} is not a finite number")
    return number


def _short(value: object) -> str:
    """A value for an error line: repr, cut to 40 characters (a 4,000-digit integer is named, not printed)."""
    text = repr(value) if not isinstance(value, int) or isinstance(value, bool) else _int_repr(value)
    return text if len(text) <= 40 else f"{text[:24]}… ({len(text):,} characters)"


def _int_repr(value: int) -> str:
    digits = len(str(abs(value))) if abs(value) < 10**4000 else None
    if digits is None or digits > 40:
        return f"{str(value)[:8]}… ({'over 4,000' if digits is None else f'{digits:,}'} digits)"
    return str(value)


def parse_bytes(text: str | int | float, *, default_unit: str = "B", what: str = "size") -> int:
    """Parse a size such as `79.18GiB`, `54.4 GiB`, `80GB`, `512MiB`, `8G`, `1,024` into int bytes.

    A number without a unit is in `default_unit` (for example `GiB` for `--kv-offloading-size`).
    Negative, non-finite and malformed values raise BadInputError naming `what`.
    """
    if isinstance(text, bool):
        raise BadInputError(f"{what}: {text!r} is not a size")
    if isinstance(text, (int, float)):
        number = as_float(text, what=what)
        unit = default_unit
    else:
        if len(text) > _MAX_NUMBER_CHARS:
            raise BadInputError(f"{what}: {_short(text)} is not a size (over {_MAX_NUMBER_CHARS} characters)")
        match = _SIZE_RE.match(text)
        if match is None:
            raise BadInputError(
                f"{what}: {text!r} is not a size (expected e.g. 80GiB, 79.18 GiB, 512MiB, 1e9)"
            )
        num_text = match.group("num")
        if "," in num_text and not re.fullmatch(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", num_text):
            raise BadInputError(f"{what}: {text!r} has misplaced thousands separators")
        try:
            number = float(num_text.replace(",", "").replace("_", ""))
        except ValueError:  # `1__0`, `1_`: the shape matched, Python's float() does not take it
            raise BadInputError(f"{what}: {text!r} is not a size") from None
        unit = match.group("unit") or default_unit
    if not math.isfinite(number):
        raise BadInputError(f"{what}: {text!r} is not a finite size")
    if number < 0:
        raise BadInputError(f"{what}: {text!r} is negative")
    scale = _unit_scale(unit, what=what, text=str(text))
    result = number * scale
    if result > 2**62:
        raise BadInputError(f"{what}: {text!r} is absurdly large")
    return round(result)


def _unit_scale(unit: str, *, what: str, text: str) -> int:
    if unit in _LETTER_BYTES:
        return _LETTER_BYTES[unit]
    scale = _UNIT_BYTES.get(unit.lower())
    if scale is None:
        raise BadInputError(
            f"{what}: unknown unit {unit!r} in {text!r} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
        )
    return scale


def bytes_to_gib(num_bytes: int | float) -> float:
    return float(num_bytes) / GiB


def gib_to_bytes(gib: float) -> int:
    return round(gib * GiB)


def mib_to_bytes(mib: float) -> int:
    return round(mib * MiB)


def format_gib(num_bytes: int | float, digits: int = 2) -> str:
    """`14.96 GiB`: the unit vLLM and SGLang print for GPU memory."""
    return f"{num_bytes / GiB:.{digits}f} GiB"


def vllm_format_gib(num_bytes: int | float) -> str:
    """Exactly vLLM's `format_gib`: `str(round(b / 2**30, 2))`, e.g. `12.5`, `0.0`."""
    return str(round(num_bytes / GiB, 2))


def format_bytes(num_bytes: int | float, *, decimal: bool = False) -> str:
    """Human size with the largest fitting unit: `1.50 GiB`, `512.00 MiB`, `812 B` (or GB/MB with decimal)."""
    sign = "-" if num_bytes < 0 else ""
    value = abs(float(num_bytes))
    units = (
        (("TB", TB), ("GB", GB), ("MB", MB), ("KB", KB))
        if decimal
        else (
            ("TiB", TiB),
            ("GiB", GiB),
            ("MiB", MiB),
            ("KiB", KiB),
        )
    )
    for name, scale in units:
        if value >= scale:
            return f"{sign}{value / scale:.2f} {name}"
    return f"{sign}{int(value)} B"


def format_count(value: int) -> str:
    """`445,632`: counts with thousands separators, as vLLM prints token counts."""
    return f"{value:,}"


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative ints (vLLM's `cdiv`)."""
    return -(-a // b)
