"""Errors that carry their exit code. The CLI prints `str(error)` as one line and exits with `exit_code`."""

from __future__ import annotations

from collections.abc import Sequence

from vramctl.core.exit_codes import ExitCode


class VramctlError(Exception):
    """Base class: a message for the user (one line, with the numbers) and the exit code."""

    exit_code: ExitCode = ExitCode.BAD_INPUT


class BadInputError(VramctlError):
    """Unusable input: a value, file or name the user gave. Exit 2."""

    exit_code = ExitCode.BAD_INPUT


class UnknownNameError(BadInputError):
    """An unknown model or GPU name; the message lists the closest known names."""

    def __init__(self, kind: str, name: str, suggestions: Sequence[str]) -> None:
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        if kind == "GPU":  # an unlisted card is planned from its total, the registry's escape hatch
            hint += " (an unlisted card: pass --gpu-memory with the total your engine's log or torch reports)"
        super().__init__(f"unknown {kind} {name!r}{hint}")
        self.kind = kind
        self.name = name
        self.suggestions = tuple(suggestions)


class ConfigUnavailableError(BadInputError):
    """A Hub checkpoint's config.json could not be had (offline, not cached, no network, HTTP 401 / 404, no
    huggingface_hub): the registry may fall back to a bundled base named by the checkpoint (vramctl.registry.derived).
    `reason` says why in a few words."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class NothingFoundError(VramctlError):
    exit_code = ExitCode.NOTHING_FOUND


class NoDeviceError(VramctlError):
    exit_code = ExitCode.NO_DEVICE


class DeviceOutOfMemoryError(VramctlError):
    exit_code = ExitCode.OUT_OF_MEMORY


class LedgerError(VramctlError):
    """A ledger whose terms do not sum to its capacity: a bug, never user input."""

    exit_code = ExitCode.CHECK_FAILED
