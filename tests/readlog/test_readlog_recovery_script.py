"""scripts/readlog_recovery.py on the start-up samples: at least 95 % of the logged numbers are recovered."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT.parent / "shared" / "samples" / "startup"


def test_recovery_on_the_samples(capsys: pytest.CaptureFixture[str]) -> None:
    if not (SAMPLES / "index.yaml").is_file():
        pytest.skip("needs ../shared (the start-up samples)")
    spec = importlib.util.spec_from_file_location(
        "readlog_recovery", ROOT / "scripts" / "readlog_recovery.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--samples", str(SAMPLES)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    found, total = (int(x) for x in last.split()[1:4:2])
    assert total > 200 and found / total >= 0.95, last
