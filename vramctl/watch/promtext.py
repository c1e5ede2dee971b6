"""A small, strict reader of the Prometheus text exposition format (version 0.0.4).

Reads what vLLM and SGLang serve on `/metrics` (both through prometheus_client): `# HELP` / `# TYPE`
comments and sample lines `name{label="value",...} value [timestamp]`. Names may hold colons (`vllm:…`,
`sglang:…`). A line that is none of these is garbage: the whole body is refused with its line number,
so a proxy's HTML page or a truncated body never reads as a server with no load.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from vramctl.core.errors import BadInputError

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SPECIAL = {"+Inf": math.inf, "-Inf": -math.inf, "Inf": math.inf, "+inf": math.inf, "-inf": -math.inf}
MAX_LINE_CHARS = 65536


class MetricsFormatError(BadInputError):
    """A /metrics body that is not the Prometheus text format. Exit 2."""


@dataclass(frozen=True)
class Series:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str, default: str = "") -> str:
        for name, value in self.labels:
            if name == key:
                return value
        return default


def _unescape(text: str) -> str:
    return text.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def _parse_labels(text: str, pos: int, lineno: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """Labels from just after `{` to just after `}`: (labels, next position)."""
    labels: list[tuple[str, str]] = []
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n and text[pos] == "}":
            return tuple(labels), pos + 1
        match = _LABEL_NAME_RE.match(text, pos)
        if match is None:
            raise MetricsFormatError(f"line {lineno}: bad label name at column {pos + 1}")
        key = match.group(0)
        pos = match.end()
        while pos < n and text[pos] in " \t":
            pos += 1
        if text[pos : pos + 2] != '="':
            raise MetricsFormatError(f"line {lineno}: label {key} has no quoted value")
        pos += 2
        start = pos
        while pos < n and text[pos] != '"':
            pos += 2 if text[pos] == "\\" else 1
        if pos >= n:
            raise MetricsFormatError(f"line {lineno}: label {key} value is not closed")
        labels.append((key, _unescape(text[start:pos])))
        pos += 1
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n and text[pos] == ",":
            pos += 1
        elif pos < n and text[pos] == "}":
            continue
        else:
            raise MetricsFormatError(f"line {lineno}: expected , or }} after label {key}")


def _parse_value(text: str, lineno: int, name: str) -> float:
    if text in _SPECIAL:
        return _SPECIAL[text]
    try:
        return float(text)
    except ValueError:
        raise MetricsFormatError(f"line {lineno}: {name} has a value that is not a number: {text[:40]!r}") from None


def parse_line(line: str, lineno: int) -> Series | None:
    """One exposition line: a Series, or None for a comment or blank line."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    if len(stripped) > MAX_LINE_CHARS:
        raise MetricsFormatError(f"line {lineno}: {len(stripped):,} characters, not a metrics line")
    match = _NAME_RE.match(stripped)
    if match is None:
        raise MetricsFormatError(f"line {lineno}: not a metrics line: {stripped[:60]!r}")
    name = match.group(0)
    pos = match.end()
    labels: tuple[tuple[str, str], ...] = ()
    if pos < len(stripped) and stripped[pos] == "{":
        labels, pos = _parse_labels(stripped, pos + 1, lineno)
    rest = stripped[pos:].split()
    if not rest or len(rest) > 2 or (pos < len(stripped) and stripped[pos] not in " \t"):
        raise MetricsFormatError(f"line {lineno}: not a metrics line: {stripped[:60]!r}")
    return Series(name, labels, _parse_value(rest[0], lineno, name))


def iter_series(body: str) -> Iterator[Series]:
    for lineno, line in enumerate(body.splitlines(), start=1):
        series = parse_line(line, lineno)
        if series is not None:
            yield series


def parse_metrics(body: str) -> tuple[Series, ...]:
    """Every sample line of a /metrics body; MetricsFormatError (exit 2) at the first garbage line."""
    if "\x00" in body:
        raise MetricsFormatError("binary data, not the Prometheus text format")
    return tuple(iter_series(body))
