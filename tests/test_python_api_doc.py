"""The Python examples in docs/python-api.md run as written (from the repository root)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "python-api.md").read_text(), flags=re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_python_api_example_runs(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        exec(compile(code, "docs/python-api.md", "exec"), {})
    finally:
        os.chdir(cwd)
