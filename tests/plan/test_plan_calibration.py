"""The calibration keeps its promises on the shared startup logs (regression guard for the estimates)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT.parent / "shared" / "samples" / "startup"


@pytest.mark.skipif(not (SAMPLES / "index.yaml").exists(), reason="../shared/samples/startup not present")
def test_calibration_report_and_kv_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("vramctl_calibrate", ROOT / "scripts" / "calibrate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["vramctl_calibrate"] = module
    spec.loader.exec_module(module)
    out = tmp_path / "accuracy.md"
    assert module.main(["--samples", str(SAMPLES), "--write", str(out)]) == 0
    text = out.read_text()
    assert "leave-one-out" in text
    row = next(line for line in text.splitlines() if line.startswith("| KV cache (GiB) |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    median_loo = float(cells[4])
    assert median_loo < 5.0, row
    capsys.readouterr()


@pytest.mark.skipif(not (SAMPLES / "index.yaml").exists(), reason="../shared/samples/startup not present")
def test_rewriting_the_report_keeps_the_hand_written_sections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--write regenerates the calibration part and keeps docs/accuracy.md from 'Unseen config.json files' on:
    rewriting the committed report changes nothing."""
    spec = importlib.util.spec_from_file_location("vramctl_calibrate_keep", ROOT / "scripts" / "calibrate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["vramctl_calibrate_keep"] = module
    spec.loader.exec_module(module)
    committed = (ROOT / "docs" / "accuracy.md").read_text()
    out = tmp_path / "accuracy.md"
    out.write_text(committed)
    assert module.main(["--samples", str(SAMPLES), "--write", str(out)]) == 0
    assert module.KEPT_FROM in committed
    assert out.read_text() == committed
    capsys.readouterr()
