"""scripts/gpu-check.sh without a GPU: exit 4, nothing written."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
torch = pytest.importorskip("torch")


def test_script_is_valid_bash() -> None:
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu-check.sh")], check=False).returncode == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the real check applies")
def test_without_cuda_exits_4_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        env={**os.environ, "OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 4
    assert "no CUDA device" in result.stderr
    assert not out.exists()
