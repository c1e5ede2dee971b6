"""Fixtures for the measure tests (helpers live in measure_helpers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from measure_helpers import TINY_CONFIG


@pytest.fixture
def tiny_model_dir(tmp_path: Path) -> str:
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    return str(folder)
