"""Entry point: builds the typer app from the per-command modules and maps errors to exit codes.

Nothing here (or in any cli module at import time) imports torch: `plan`, `check`, `explain-oom`,
`read-log` and `tiers plan/simulate` must stay fast and GPU-free.
"""

from __future__ import annotations

import os
import sys

import typer

from vramctl import __version__
from vramctl.cli import catalog, check, explain_oom, plan, profile, read_log, tiers
from vramctl.core.errors import VramctlError
from vramctl.core.exit_codes import ExitCode

app = typer.Typer(
    name="vramctl",
    help="Where an LLM inference server's GPU memory goes: plan it, measure it, explain its OOMs, size its KV tiers.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vramctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """vramctl: GPU memory for vLLM and SGLang, before, during and after."""


for _module in (plan, check, explain_oom, read_log, profile, tiers, catalog):
    _module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every failure becomes one line on stderr and a documented exit code."""
    try:
        app(args=argv, prog_name="vramctl", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else ExitCode.BAD_INPUT)
        return int(code)
    except VramctlError as exc:
        print(f"vramctl: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("vramctl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the last line of defence: one line, never a traceback
        if os.environ.get("VRAMCTL_DEBUG"):
            raise
        print(
            f"vramctl: internal error: {type(exc).__name__}: {exc} (set VRAMCTL_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return int(ExitCode.INTERNAL_ERROR)
    return 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
