"""One rule for the width of rich output, for every command.

On a terminal, its width. Piped or redirected (CI logs, `| less`, a file), `COLUMNS` when it is set, else
PIPED_WIDTH: one documented default (docs/cli.md), the same for every command. Every table folds long cells
rather than cutting them, so a flag name or a value is never shortened to `…` at 80 columns.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console

PIPED_WIDTH = 80
"""Columns of rich output that goes to a pipe or a file when `COLUMNS` is not set."""
MIN_WIDTH = 40


def output_width(stream: Any = None) -> int | None:
    """The width to render at: `COLUMNS` if set, None (rich measures the terminal) on a terminal, else
    PIPED_WIDTH."""
    raw = os.environ.get("COLUMNS", "").strip()
    if raw.isdigit() and int(raw) >= MIN_WIDTH:
        return int(raw)
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        return None
    return PIPED_WIDTH


def make_console(*, stderr: bool = False, **kwargs: Any) -> Console:
    """A Console at `output_width()`, no soft wrap (rich wraps at the width, never past it)."""
    kwargs.setdefault("soft_wrap", False)
    return Console(stderr=stderr, width=output_width(sys.stderr if stderr else sys.stdout), **kwargs)


def wrap_lines(text: str, width: int | None = None) -> str:
    """Plain-text output wrapped at the output's width: a line longer than it breaks between words and
    continues indented by two spaces; words (paths, flags) are never split, shorter lines are untouched."""
    import shutil
    import textwrap

    limit = width or output_width() or shutil.get_terminal_size((PIPED_WIDTH, 24)).columns
    out: list[str] = []
    for line in text.splitlines():
        _, _, value = line.partition(": ")
        if len(line) <= limit or (value and " " not in value.strip()):
            out.append(line)  # short, or `label: one-path-or-word` (kept whole: scripts read such lines)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.extend(
            textwrap.wrap(
                line,
                width=limit,
                subsequent_indent=indent + "  ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            or [line]
        )
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


__all__ = ["MIN_WIDTH", "PIPED_WIDTH", "make_console", "output_width", "wrap_lines"]
