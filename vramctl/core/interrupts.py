"""SIGINT and SIGTERM, handled alike: both raise in the main thread, so every `finally` and `except
KeyboardInterrupt` cleanup runs (temporaries and bench files removed, device memory released), and the CLI exits
130 for SIGINT (Ctrl-C) and 143 for SIGTERM (docker stop, CI cancellation, `timeout`): 128 + the signal number.

The signal is also recorded: a library that swallows the exception (an interrupt inside a third-party import that
catches everything) cannot make the run carry on and save as if nothing happened; `raise_if_pending()` at the
points that matter (before a save, after an import that failed) raises it again.

Pure: only `signal` and `os`; installing handlers is the CLI's business (`handling_signals`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so the same cleanup runs; exit 143."""


_pending: list[int] = []


def exit_code_for(exc: BaseException) -> int:
    """128 + the signal number: 143 for SIGTERM, 130 for SIGINT (and any other KeyboardInterrupt)."""
    return 128 + int(signal.SIGTERM) if isinstance(exc, Terminated) else 128 + int(signal.SIGINT)


def pending() -> int | None:
    """The signal received during this run that has not been answered yet, if any."""
    return _pending[-1] if _pending else None


def raise_if_pending() -> None:
    """Raise the interrupt again when one was received (and perhaps swallowed by a library) during this run."""
    signum = pending()
    if signum is not None:
        raise _exception_for(signum)


def _exception_for(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


_REPEAT_S = 2.0
"""A second signal within this time of the first is recorded, not raised: the first is already unwinding through
the cleanup (a traceback from a cleanup cut in half would be the result). Later, it is raised again: the first
was swallowed by a library."""
_raised_at: list[float] = []


_committed: list[bool] = []
"""Set by `commit()`: the run's result is written; an interrupt from then on is ignored."""


def commit() -> None:
    """The run's result is written (its `--save` file is in place): an interrupt from here on can no longer leave
    "nothing saved", so it is ignored and the run ends with its own exit code instead of claiming it was stopped
    before saving. Cleared when the next run starts (`handling_signals`)."""
    _committed.append(True)


def answered() -> None:
    """The interrupt was handled (the command printed its line and chose its exit code): forget it."""
    _pending.clear()


def _handler(signum: int, frame: FrameType | None) -> None:
    del frame
    if _committed:
        return
    now = time.monotonic()
    _pending.append(signum)
    if _raised_at and now - _raised_at[-1] < _REPEAT_S:
        return
    _raised_at.append(now)
    raise _exception_for(signum)


@contextlib.contextmanager
def handling_signals() -> Iterator[None]:
    """For the duration of a CLI run: SIGINT and SIGTERM raise (KeyboardInterrupt / Terminated) and are recorded;
    the previous handlers come back afterwards. Outside the main thread (a test harness) nothing is changed."""
    _pending.clear()
    _raised_at.clear()
    _committed.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN:  # `nohup`, a shell's background job: keep ignoring it
            continue
        previous[signum] = current
        signal.signal(signum, _handler)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _pending.clear()


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Block SIGINT and SIGTERM around starting child processes: the children start with both blocked (the mask
    is inherited through fork and exec), so a Ctrl-C to the terminal's process group reaches the parent alone,
    which then stops them itself; a signal that came meanwhile is delivered to the parent when unblocked."""
    signals = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def install_early() -> None:
    """From the first line of the program until the CLI's own handlers are in place (and again after they are
    removed): a signal ends the process at once with 130 / 143 and one line, since nothing has been created yet
    that would need cleaning. Without it, a Ctrl-C while Python imports the CLI printed a KeyboardInterrupt
    traceback."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _early_handler)


def _early_handler(signum: int, frame: FrameType | None) -> None:
    del frame
    if _committed:  # after the run's result was written, while the CLI returns: nothing to stop any more
        return
    word = b"terminated" if signum == signal.SIGTERM else b"interrupted"
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(OSError):
        os.write(2, b"vramctl: " + word + b"\n")
    os._exit(128 + signum)
