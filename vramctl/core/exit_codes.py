"""The process exit codes every vramctl command uses (documented in docs/exit-codes.md)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    """Success: the plan fits, every check holds, a failure was diagnosed."""
    CHECK_FAILED = 1
    """A requirement failed or the configuration does not fit / validate."""
    BAD_INPUT = 2
    """Bad input or usage: unknown model or GPU, malformed file, absurd number."""
    NOTHING_FOUND = 3
    """Nothing to report, e.g. a log that holds no failure."""
    NO_DEVICE = 4
    """No usable device for a measurement."""
    OUT_OF_MEMORY = 5
    """The device ran out of memory during a measurement."""
    INTERNAL_ERROR = 70
    """A bug in vramctl (EX_SOFTWARE); reported as one line, traceback with VRAMCTL_DEBUG=1."""
