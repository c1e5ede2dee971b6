"""Entry point: builds the typer app from the per-command modules and maps errors to exit codes.

Nothing here (or in any cli module at import time) imports torch: `plan`, `check`, `explain-oom`,
`read-log` and `tiers plan/simulate` must stay fast and GPU-free.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import sys
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

from vramctl import __version__
from vramctl.cli.lean import MAX_ERROR_CHARS as MAX_ERROR_CHARS  # re-exported: the limit of an error line
from vramctl.cli.lean import end_run, last_resort
from vramctl.cli.lean import one_line as _one_line
from vramctl.core.errors import VramctlError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.interrupts import Terminated, exit_code_for, handling_signals, raise_if_pending

# Command name → the module whose `register(app)` defines it. Modules are imported only when their
# command runs (or for `--help`), so `vramctl plan` never pays for the log catalogue, torch, etc.
COMMAND_MODULES: dict[str, str] = {
    "plan": "vramctl.cli.plan",
    "diff": "vramctl.cli.diff",
    "check": "vramctl.cli.check",
    "profile": "vramctl.cli.profile",
    "suggest": "vramctl.cli.profile",
    "validate": "vramctl.cli.profile",
    "explain-oom": "vramctl.cli.explain_oom",
    "read-log": "vramctl.cli.read_log",
    "watch": "vramctl.cli.watch",
    "tiers": "vramctl.cli.tiers",
    "models": "vramctl.cli.catalog",
    "gpus": "vramctl.cli.catalog",
}


@functools.cache
def _module_commands(module_name: str) -> dict[str, Any]:
    module = importlib.import_module(module_name)
    sub_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    module.register(sub_app)
    group = typer.main.get_group(sub_app)
    return dict(group.commands)


class LazyCommandGroup(TyperGroup):
    """The root group: lists every command, imports a command's module only when it is needed."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMAND_MODULES)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        module_name = COMMAND_MODULES.get(cmd_name)
        if module_name is None:
            return None
        return _module_commands(module_name).get(cmd_name)


app = typer.Typer(
    name="vramctl",
    help="Where an LLM inference server's GPU memory goes: plan it, measure it, explain its OOMs, size its KV tiers.",
    no_args_is_help=False,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=LazyCommandGroup,
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


def _usage_error_line(exc: typer.TyperException) -> str:
    """Click's usage errors, as one line: the problem and where to look."""
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "vramctl"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return f"{message} (see `{command} --help`)"


def _broken_pipe(exc: BaseException | None) -> bool:
    return isinstance(exc, BrokenPipeError) or (isinstance(exc, OSError) and exc.errno == errno.EPIPE)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every failure becomes one line on stderr and a documented exit code."""
    if sys.stdout is None:
        # fd 1 was closed before Python started (`vramctl plan >&-`): print() would drop the answer silently
        print("vramctl: error: standard output is closed: nowhere to write the answer", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    with handling_signals():
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    bad = next((arg for arg in argv or () if "\x00" in arg), None)
    if bad is not None:  # execve cannot pass one; `main([...])` from Python can, and no file name holds it
        print(f"vramctl: error: {_one_line(repr(bad))}: an argument holds a NUL byte", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    try:
        try:
            result = app(args=argv, prog_name="vramctl", standalone_mode=False)
        finally:
            raise_if_pending()  # a signal a library swallowed still ends the run as interrupted
    except SystemExit as exc:
        if _broken_pipe(exc.__context__):  # click turns EPIPE into exit 1; the docs promise `| head` exits 0
            return 0
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else ExitCode.BAD_INPUT)
        return int(code)
    except VramctlError as exc:
        print(f"vramctl: error: {_one_line(str(exc))}", file=sys.stderr)
        return int(exc.exit_code)
    except (KeyboardInterrupt, typer.Abort) as exc:
        # click turns a KeyboardInterrupt (and so SIGTERM's Terminated) into Abort: the signal is its cause
        signal_exc = exc if isinstance(exc, KeyboardInterrupt) else exc.__cause__ or exc.__context__
        terminated = isinstance(signal_exc, Terminated)
        with contextlib.suppress(OSError, ValueError):
            print("vramctl: terminated" if terminated else "vramctl: interrupted", file=sys.stderr)
        return exit_code_for(Terminated() if terminated else KeyboardInterrupt())
    except BrokenPipeError:
        return 0
    except typer.TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError" and getattr(exc, "ctx", None) is not None:
            with contextlib.suppress(BrokenPipeError):
                print(exc.ctx.get_help())  # type: ignore[attr-defined]
            return 0
        print(f"vramctl: error: {_one_line(_usage_error_line(exc))}", file=sys.stderr)
        return int(getattr(exc, "exit_code", ExitCode.BAD_INPUT))
    except Exception as exc:  # the last line of defence: one line, never a traceback
        return last_resort(exc)
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def entry() -> None:
    end_run(main())


if __name__ == "__main__":
    entry()
