"""What the CLI needs before (or without) typer: one-line errors, the way a run ends, and `explain-oom --json LOG`.

`vramctl explain-oom --json LOG` is what scripts and CI gates run on large logs, where start-up counts: importing
typer / click and building the app costs ~0.04 s of CPU, a sixth of what `grep -E -c` takes over a 256 MiB log
(docs/perf/explain-oom.md). `vramctl.__main__` runs that exact command line here (`lean_command`), with the same
output, exit codes and error lines as the typer command (`vramctl/cli/explain_oom.py`; tests/diagnose/
test_oom_cli_lean.py runs both); every other command line, `--help` and any other option included, goes to typer.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from vramctl.core.errors import VramctlError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.interrupts import Terminated, exit_code_for, handling_signals, raise_if_pending

MAX_ERROR_CHARS = 2000
"""An error line repeats the user's value; a 100,000-character argument must not make a 100 KB line."""

_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # str.splitlines() breaks a line at each of these


def one_line(message: str) -> str:
    """The message as one line: a newline or carriage return from the user's token is escaped (`\\n`), a very
    long message is cut in the middle."""
    if any(ch in message for ch in "\n\r" + _BREAKS):
        message = "".join(_escape_break(ch) for ch in message)
    if len(message) <= MAX_ERROR_CHARS:
        return message
    keep = MAX_ERROR_CHARS // 2
    return f"{message[:keep]} … ({len(message) - 2 * keep:,} characters cut) … {message[-keep:]}"


def _escape_break(ch: str) -> str:
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch in _BREAKS:
        return ascii(ch)[1:-1]
    return ch


def last_resort(exc: Exception) -> int:
    """An exception no command answered: one line and its exit code, never a traceback. A RecursionError is bad input
    (a JSON / YAML input nested thousands deep, from any reader); anything else is an internal error
    (`VRAMCTL_DEBUG=1` raises it again, with its traceback)."""
    if isinstance(exc, RecursionError):
        print("vramctl: error: input is nested too deeply to read", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    if os.environ.get("VRAMCTL_DEBUG"):
        raise exc
    print(
        f"vramctl: internal error: {type(exc).__name__}: {one_line(str(exc))} (set VRAMCTL_DEBUG=1 for the traceback)",
        file=sys.stderr,
    )
    return int(ExitCode.INTERNAL_ERROR)


def end_run(code: int) -> None:
    """Exit with the run's code (the end of `vramctl.cli.main.entry`)."""
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        # Interrupted: what vramctl held is released and its line printed. Skip the interpreter's finalisation: an
        # interrupt inside `import torch` leaves half-initialised extension modules whose teardown can die of the
        # signal (exit -2) after the clean exit code was chosen.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    # The run is over and what it writes is written. The interpreter's finalisation puts the default action back
    # on every signal with a Python handler, so a SIGTERM / Ctrl-C arriving now would kill a finished run
    # (exit -15 / -2, seen under load in CI): ignored from here, the exit code stays the run's.
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, signal.SIG_IGN)
    sys.exit(code)


def lean_log(argv: list[str]) -> str | None:
    """The LOG of a command line that is exactly `explain-oom --json LOG` or `explain-oom LOG --json` (LOG a file
    name: not `-`, no option, no NUL), else None (typer runs it)."""
    if len(argv) != 3 or argv[0] != "explain-oom" or argv.count("--json") != 1:
        return None
    log = argv[2] if argv[1] == "--json" else argv[1]
    if not log or log.startswith("-") or "\x00" in log:
        return None
    return log


def lean_command(argv: list[str]) -> int | None:
    """Run `explain-oom --json LOG` without typer: the exit code, or None when the command line is not that one."""
    log = lean_log(argv)
    if log is None:
        return None
    if sys.stdout is None:
        print("vramctl: error: standard output is closed: nowhere to write the answer", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    _reuse_freed_blocks()
    from vramctl.cli import codecache

    codecache.install()  # before the diagnosis modules (~40 dataclasses, ~100 regexes) are imported
    with handling_signals():
        code = _explain_oom_json(log)
    codecache.finish()
    return code


M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameters (malloc.h)."""
BLOCK_HEAP_BYTES = 64 << 20
"""Allocations up to this size come from the heap, and freed heap memory up to it is kept for reuse (`_reuse_freed_blocks`)."""


def _reuse_freed_blocks() -> None:
    """Let glibc reuse the memory of a freed 8 MiB block for the next one (this process only: the CLI's run).

    Each block of a large log is a fresh 8 MiB `bytes` (`os.pread`); glibc serves it from new pages (mmap, or heap
    memory it gave back on the previous free), and the kernel zeroes every page on first touch: ~46,000 page faults
    for a 256 MiB log. Keeping freed heap memory halves them (~0.02 s of system time, docs/perf/explain-oom.md). Peak
    memory is unchanged (the blocks alive at once are the same). A no-op where the C library is not glibc."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, BLOCK_HEAP_BYTES)
        libc.mallopt(M_TRIM_THRESHOLD, BLOCK_HEAP_BYTES)
    except Exception:  # no confstr name, no mallopt: the default allocator settings stand
        return


def skip_exit_collection() -> None:
    """Let the interpreter's finalisation skip its full collections of what the run made: the process ends next.

    Finalisation collects every generation even with the collector off (~5 % of a short `explain-oom` run's
    instructions: the modules, the catalogue, the compiled databases); objects alive now go to the permanent
    generation, which it skips. Reference counting still frees them as the modules are cleared."""
    import gc

    gc.freeze()


def _explain_oom_json(log: str) -> int:
    """`_diagnose_and_print` with the cyclic garbage collector off, as it was before afterwards.

    A scan allocates hundreds of thousands of small objects (lines, hits, facts); each 700 allocations start a
    collection, and each full one walks every object the imports and the catalogue made: ~2 % of the run's CPU on a
    256 MiB log (docs/perf/explain-oom.md). The scan makes no reference cycles that grow with the log (reference
    counting frees its objects): peak RSS is the same with the collector off, measured on a 64 MiB log of back-to-back
    OOM tracebacks (122 MiB either way)."""
    import gc

    collector_was_on = gc.isenabled()
    gc.disable()
    try:
        return _diagnose_and_print(log)
    finally:
        if collector_was_on:
            gc.enable()


def _diagnose_and_print(log: str) -> int:
    try:
        try:
            from vramctl.diagnose.classify import diagnose
            from vramctl.render.jsonout import dumps

            result = diagnose(log)
            sys.stdout.write(dumps(result.to_json()) + "\n")
            sys.stdout.flush()
        finally:
            raise_if_pending()  # a signal a library swallowed still ends the run as interrupted
    except VramctlError as exc:
        print(f"vramctl: error: {one_line(str(exc))}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        with contextlib.suppress(OSError, ValueError):
            print("vramctl: terminated" if terminated else "vramctl: interrupted", file=sys.stderr)
        return exit_code_for(Terminated() if terminated else KeyboardInterrupt())
    except BrokenPipeError:  # the docs promise `| head` exits 0
        return 0
    except Exception as exc:  # the last line of defence
        return last_resort(exc)
    return int(ExitCode.OK if result.found_failure else ExitCode.NOTHING_FOUND)
