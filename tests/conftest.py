"""Suite-wide: tests that read the reference material beside the project (`../shared`: real logs and traces
that are not redistributed with it) are marked `@pytest.mark.shared("samples/oom")` and skip, naming what they
need, when it is absent — so `python -m pytest` passes from a clone of the project alone."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def shared_present(sub: str = "") -> bool:
    return (SHARED / sub).exists()


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("shared"):
        sub = str(mark.args[0]) if mark.args else ""
        if not shared_present(sub):
            pytest.skip(
                f"needs ../shared/{sub} (real logs and traces kept beside the project, not in a clone)"
            )
