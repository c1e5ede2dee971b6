"""Facts: the numbers a log states, read the way each engine prints them, and the arithmetic on them.

Units in logs (the one rule that matters): every GPU-memory number that torch, vLLM and SGLang print as
"GB"/"MB" is binary (torch prints GiB/MiB since 1.x; vLLM's V0 `Loading model weights took 5.2032 GB`
divides by 2**30; SGLang's `GB = 1024*1024*1024`, `python/sglang/srt/server_args.py` (SGLang v0.5.23)). So a size read with unit `size` treats
GB/MB/KB as GiB/MiB/KiB. Host sizes that SGLang's HiCache and Ray print in decimal GB use
`size-decimal`. Byte counts (`10200547328 bytes`) are exact. Parsing goes through core/units.py's
`parse_bytes` and `parse_number` (thousands separators, `12.5` == `12.50`).

Expressions (catalogue `when` / `let` / `derive`): a tiny, safe arithmetic language evaluated with
`ast`: numbers, names, + - * /, comparisons, and/or/not, and the functions floor, ceil, floor2, ceil2,
min, max, abs. A name that is not known makes the whole expression unknown (None), so a rule or fix
that needs a number the log did not print simply does not apply.
"""

from __future__ import annotations

import ast
import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.core.units import GiB, KiB, MiB, format_count, parse_bytes, parse_number

FactValue = int | float | str
"""A fact: int (bytes when the name ends in `_bytes`; counts), float (ratios, GiB numbers), str (words)."""

UNITS = ("GiB", "MiB", "KiB", "bytes", "size", "size-decimal", "int", "float", "ratio", "word", "dtype_bits")

_DTYPE_BITS = {
    "float": 32,
    "float32": 32,
    "fp32": 32,
    "torch.float32": 32,
    "half": 16,
    "float16": 16,
    "fp16": 16,
    "torch.float16": 16,
    "bfloat16": 16,
    "bf16": 16,
    "torch.bfloat16": 16,
}
"""`--dtype` / `dtype=` values (vLLM and SGLang accept the same names) -> bits per weight element; `auto` is the
checkpoint's own dtype (unknown here)."""

_SIZE_TEXT_RE = re.compile(r"^\s*(?P<num>[+-]?[\d.,_]+)\s*(?P<unit>[KMGT]?i?B|bytes?|[KMGT])?\s*$")
_BINARY_FOR_DECIMAL = {
    "KB": "KiB",
    "MB": "MiB",
    "GB": "GiB",
    "TB": "TiB",
    "K": "KiB",
    "M": "MiB",
    "G": "GiB",
    "T": "TiB",
}


def parse_logged_size(text: str, *, decimal: bool = False) -> int:
    """`16.00 GiB`, `953.94 MiB`, `5.2032 GB` (= GiB), `1,024 MiB`, `10200547328 bytes` -> int bytes.

    With `decimal=False` (GPU memory as the engines print it) GB/MB/KB mean GiB/MiB/KiB. A negative
    number is allowed (vLLM prints a negative KV budget) and gives negative bytes.
    """
    m = _SIZE_TEXT_RE.match(text)
    if m is None:
        raise BadInputError(f"log size: {text!r} is not a size")
    num, unit = m.group("num"), m.group("unit") or "B"
    if unit.lower().startswith("byte"):
        unit = "B"
    if not decimal:
        unit = _BINARY_FOR_DECIMAL.get(unit, unit)
    negative = num.startswith("-")
    value = parse_bytes(f"{num.lstrip('+-')}{unit}", what="log size")
    return -value if negative else value


def convert(text: str, unit: str) -> FactValue:
    """One captured group, read in its catalogue unit (see the module docstring)."""
    raw = text.strip()
    if unit == "word":
        return raw
    if unit == "dtype_bits":
        bits = _DTYPE_BITS.get(raw.lower())
        if bits is None:
            raise BadInputError(f"dtype {raw!r}: bits per weight unknown")
        return bits
    if unit in ("size", "size-decimal"):
        return parse_logged_size(raw, decimal=unit == "size-decimal")
    if unit in ("GiB", "MiB", "KiB", "bytes"):
        scale = {"GiB": GiB, "MiB": MiB, "KiB": KiB, "bytes": 1}[unit]
        return round(parse_number(raw, what="log number") * scale)
    number = parse_number(raw, what="log number")
    if unit == "int":
        return int(number)
    return float(number)


# --------------------------------------------------------------------------------------------------
# Safe expressions over facts.

_FUNCTIONS: dict[str, Callable[..., float]] = {
    "floor": lambda x: float(math.floor(x + 1e-9)),
    "ceil": lambda x: float(math.ceil(x - 1e-9)),
    "floor2": lambda x: math.floor(x * 100 + 1e-6) / 100,
    "ceil2": lambda x: math.ceil(x * 100 - 1e-6) / 100,
    "min": lambda *a: float(min(a)),
    "max": lambda *a: float(max(a)),
    "abs": lambda x: float(abs(x)),
    # `known(name)`: whether the log gave that fact (evaluated on the name itself, never on its value)
    "known": lambda x: float(bool(x)),
}
_CONSTANTS: dict[str, float] = {"GiB": float(GiB), "MiB": float(MiB), "KiB": float(KiB)}

_BINOPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b if b else math.inf,
}
_CMPOPS: dict[type[ast.cmpop], Callable[[float, float], bool]] = {
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}


class _Unknown(Exception):
    """A name the expression needs is not among the facts."""


@functools.lru_cache(maxsize=1024)
def compile_expression(text: str) -> ast.Expression:
    """Parse and check an expression; raises ValueError for anything outside the small language. Memoised: the
    catalogue and the fix table repeat a third of their ~280 expressions (a tree is only read, never changed)."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
                raise ValueError(f"expression {text!r}: only {sorted(_FUNCTIONS)} may be called")
        elif not isinstance(
            node,
            (
                ast.Expression,
                ast.BinOp,
                ast.UnaryOp,
                ast.BoolOp,
                ast.Compare,
                ast.Name,
                ast.Constant,
                ast.Load,
                ast.operator,
                ast.cmpop,
                ast.boolop,
                ast.unaryop,
            ),
        ) or (isinstance(node, ast.BinOp) and type(node.op) not in _BINOPS):
            raise ValueError(f"expression {text!r}: {type(node).__name__} is not allowed")
        elif isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ValueError(f"expression {text!r}: only numeric constants are allowed")
    return tree


def evaluate(tree: ast.Expression, names: Mapping[str, Any]) -> float | bool | None:
    """Evaluate a compiled expression; None when a needed fact is missing or a value is not a number."""
    try:
        result = _eval(tree.body, names)
    except (_Unknown, TypeError, ValueError, OverflowError, ZeroDivisionError):
        return None
    if isinstance(result, (bool, int, float)):
        return result
    if isinstance(result, str):
        return bool(result)
    return None


def _eval(node: ast.expr, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in names:
            value = names[node.id]
            if isinstance(value, bool):
                return value
            if isinstance(value, (int, float, str)):
                return value  # a word fact is true when present (arithmetic on it is unknown)
            raise _Unknown(node.id)
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        if node.id.startswith(("hint_", "phase_", "cause_", "engine_")):
            return False
        raise _Unknown(node.id)
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval(node.left, names), _eval(node.right, names))
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, names)
        if isinstance(node.op, ast.Not):
            return not value
        if isinstance(node.op, ast.USub):
            return -value
        return value
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, names) for v in node.values)
        # `or`: an unknown operand counts as false, so "a or b" holds when either is known and true
        for v in node.values:
            try:
                if _eval(v, names):
                    return True
            except _Unknown:
                continue
        return False
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, names)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "known":
            return len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in names
        return _FUNCTIONS[node.func.id](*[_eval(a, names) for a in node.args])
    raise _Unknown(ast.dump(node))


# --------------------------------------------------------------------------------------------------
# Filling `{name}` / `{name:fmt}` placeholders.

_PLACEHOLDER_RE = re.compile(r"\{(?P<name>[A-Za-z_]\w*)(?::(?P<fmt>\w+))?\}")


def format_fact(name: str, value: FactValue, fmt: str | None = None) -> str:
    """How a fact is written in an explanation: `31.44 GiB`, `953.94 MiB`, `205,728`, `0.64`."""
    if isinstance(value, str):
        return value
    if fmt == "gib":
        return f"{value / GiB:.2f} GiB"
    if fmt == "mib":
        return f"{value / MiB:.2f} MiB"
    if fmt == "gb":
        return f"{value / 1e9:.2f} GB"
    if fmt == "count":
        return format_count(int(value))
    if fmt == "ratio":
        return f"{float(value):.2f}"
    if name.endswith("_bytes") and fmt is None:
        return f"{value / GiB:.2f} GiB" if abs(value) >= GiB else f"{value / MiB:.2f} MiB"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1:
            return str(int(value))
        return f"{value:.2f}".rstrip("0").rstrip(".") if abs(value) < 1 else f"{value:.2f}"
    return str(value)


def fill(template: str, names: Mapping[str, Any]) -> str | None:
    """Fill the placeholders of a template; None when one of them is unknown."""
    missing = False

    def sub(m: re.Match[str]) -> str:
        nonlocal missing
        value = names.get(m.group("name"))
        if value is None or isinstance(value, bool):
            missing = True
            return ""
        return format_fact(m.group("name"), value, m.group("fmt"))

    out = _PLACEHOLDER_RE.sub(sub, template)
    return None if missing else out


def placeholders(template: str) -> list[str]:
    return [m.group("name") for m in _PLACEHOLDER_RE.finditer(template)]


# --------------------------------------------------------------------------------------------------
# Settings printed in a log: `non-default args: {...}`, `Namespace(...)`, `ServerArgs(...)`, TGI `Args {`,
# and command lines (`vllm serve M --gpu-memory-utilization 0.95`).


def settings_pattern(name: str, flags: tuple[str, ...]) -> str:
    """`name=0.9`, `name: 0.9`, `'name': 0.9`, `"name": 0.9`, `--flag 0.9`, `--flag=0.9`. A match holds `name` or one of
    `flags` literally (a line with none of them cannot match: `settings_regex`'s callers test that first)."""
    value = r"(Some\([^)]*\)|'[^']*'|\"[^\"]*\"|[\w.+\-/]+)"
    parts = [rf"(?<![\w-])['\"]?{re.escape(name)}['\"]?\s*[:=]\s*{value}"]
    if flags:
        flag_alt = "|".join(re.escape(f) for f in flags)
        parts.append(rf"(?<![\w-])(?:{flag_alt})(?:\s+|=){value}")
    return "|".join(f"(?:{p})" for p in parts)


def settings_regex(name: str, flags: tuple[str, ...]) -> re.Pattern[str]:
    """`settings_pattern`, compiled."""
    return re.compile(settings_pattern(name, flags))


def read_setting(text: str, regex: re.Pattern[str], unit: str) -> FactValue | None:
    """The value of one setting on a line, or None (unset / None / not a number)."""
    for m in regex.finditer(text):
        raw = next((g for g in m.groups() if g is not None), None)
        if raw is None:
            continue
        raw = raw.strip("'\"")
        if raw.startswith("Some(") and raw.endswith(")"):
            raw = raw[5:-1].strip("'\"")
        if raw in ("None", "null", ""):
            continue
        if unit == "word":
            return raw
        try:
            return convert(raw, unit)
        except BadInputError:
            continue
    return None
