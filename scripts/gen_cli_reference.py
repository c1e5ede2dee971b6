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
        _values(),
        _engine_flags(),
    ]
    for path, command in _walk(root, ["vramctl"]):
        ctx = typer.Context(command, info_name=" ".join(path), terminal_width=100, max_content_width=100)
        parts.append(f"\n## `{' '.join(path)}`\n\n```text\n{command.get_help(ctx).rstrip()}\n```\n")
    return "".join(parts)


def _values() -> str:
    return (
        "\n## Values\n\n"
        "One spelling of a value works on every command, in a serve command after `--` and in a check spec\n"
        "(`vramctl.core.engines.flags` reads them all):\n\n"
        "- **Counts** (`--max-model-len`, `--max-num-seqs`, `-tp`, …) are vLLM's human-readable integers: `8192`,\n"
        "  `32k` (32,000), `32K` (32,768), `1_000`; `--max-model-len auto` (or `-1`) is vLLM's auto-fit.\n"
        "- **Engine sizes** keep the engine's unit for a bare number and take any unit written out:\n"
        "  `--kv-cache-memory-bytes` bytes (`8000000000`, `8G`, `54.4GiB`), `--kv-offloading-size` GiB (`64`,\n"
        "  `64GiB`), `--hicache-size` decimal GB (`40`, `40GB`).\n"
        "- **vramctl's own memory sizes** (`--gpu-memory`, `--free-memory`, `--host-memory`, `--device-memory`,\n"
        "  `--min-free`, a spec's `gpu_memory` / `host_memory` / `free_memory`): **a bare number is GiB**\n"
        "  (`--gpu-memory 80` = `80GiB`); write a unit for anything else (`79.18GiB`, `512MiB`, `80GB`,\n"
        "  `85899345920B`). A bare number above 1,048,576 (a PiB) is refused as bytes missing their unit.\n"
        "- `GiB` / `MiB` are binary, `GB` / `MB` decimal; one letter follows vLLM (`8g` decimal, `8G` binary).\n"
        "- vramctl's own flags written after `--` inside a serve command (`--gpu`, `--json`, `--engine`, …) are\n"
        "  honoured as if written before it, or refused with what to write instead (never dropped).\n"
    )


def _engine_flags() -> str:
    from vramctl.core.engines.flags import REGISTRY

    rows = [
        "\n## Engine flags\n\n"
        "Every engine flag vramctl reads (the registry `vramctl.core.engines.flags`): `plan` takes those\n"
        "marked *option* as options; every one is read in a serve command after `--` (and by `diff`) and in\n"
        "a check spec's `flags:` / `command:`; read-log reads those marked *log* from the engines' args lines.\n\n"
        "| flag | aliases | engines | value | sets | where | help |\n"
        "|---|---|---|---|---|---|---|\n"
    ]
    for entry in REGISTRY:
        aliases = ", ".join(f"`{a}`" for a in entry.aliases)
        if entry.negatable:
            aliases = ", ".join(x for x in (aliases, f"`--no-{entry.key}`") if x)
        where = ", ".join(w for w, on in (("option", entry.cli), ("log", entry.in_logs)) if on) or "command"
        help_text = entry.help.replace("|", "\\|")
        rows.append(
            f"| `{entry.name}` | {aliases} | {'/'.join(entry.engines)} | {entry.kind} | `{entry.target}` | "
            f"{where} | {help_text} |\n"
        )
    return "".join(rows)


def main() -> int:
    target = ROOT / "docs" / "cli.md"
    text = render()
    if "--check" in sys.argv:
        return 0 if target.exists() and target.read_text() == text else 1
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
