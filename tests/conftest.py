"""Suite-wide settings.

- No test reaches the Hugging Face Hub: a model name shaped like `org/name` that is not bundled is looked up
  offline (HF_HUB_OFFLINE=1, inherited by the CLI subprocesses too). tests/registry/test_registry_hub.py serves the
  Hub's endpoints on loopback and sets its own environment.
- Tests that read the reference material beside the project (`../shared`: real logs and traces that are not
  redistributed with it) are marked `@pytest.mark.shared("samples/oom")` and skip, naming what they need, when it
  is absent — so `python -m pytest` passes from a clone of the project alone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

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
