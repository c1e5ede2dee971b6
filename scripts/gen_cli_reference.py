#!/usr/bin/env python3
"""Regenerate docs/cli.md from the commands' --help (a test checks it is current).

Usage: python scripts/gen_cli_reference.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
import typer.main

ROOT = Path(__file__).resolve().parent.parent


def _walk(command: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    found = [(path, command)]
    if hasattr(command, "list_commands"):
        ctx = typer.Context(command, info_name=path[-1])
        for name in command.list_commands(ctx):
            found.extend(_walk(command.get_command(ctx, name), [*path, name]))
    return found


def render() -> str:
    from vramctl.cli.main import app

    root = typer.main.get_command(app)
    parts = [
        "# CLI reference\n",
        "Generated from `--help` by `python scripts/gen_cli_reference.py`; `tests/test_cli_reference.py`\n"
        "fails when it is out of date.\n",
        "\n## Output width\n\n"
        "Every command renders at the terminal's width. Piped or redirected (a CI log, `| less`, a file), the\n"
        "output is `COLUMNS` wide when that is set, else 80 columns: one default for every command. Everything\n"
        "is readable at 80: long cells fold rather than being cut to `…`, `check` prints what to change on whole\n"
        "lines under its table, and `models` / `gpus` leave out the columns that do not fit (the title names\n"
        "them; `COLUMNS=200 vramctl models` shows all). `--json` and `--markdown` do not depend on the width.\n"
        "\n## Shell completion\n\n"
        "`vramctl --install-completion` installs tab completion for the current shell (bash, zsh, fish,\n"
        "PowerShell); `vramctl --show-completion` prints the script to install by hand.\n",
    ]
    for path, command in _walk(root, ["vramctl"]):
        ctx = typer.Context(command, info_name=" ".join(path), terminal_width=100, max_content_width=100)
        parts.append(f"\n## `{' '.join(path)}`\n\n```text\n{command.get_help(ctx).rstrip()}\n```\n")
    return "".join(parts)


def main() -> int:
    target = ROOT / "docs" / "cli.md"
    text = render()
    if "--check" in sys.argv:
        return 0 if target.exists() and target.read_text() == text else 1
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
