"""Issue 12, item 8: a model path in a check spec resolves against the spec file's folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "profiles" / "measured" / "tiny-llama"


@pytest.mark.parametrize("written", ["./models/tiny", "models/tiny", "models/tiny/config.json"])
def test_relative_model_path_is_read_beside_the_spec(tmp_path: Path, written: str) -> None:
    deploy = tmp_path / "deploy"
    shutil.copytree(TINY, deploy / "models" / "tiny")
    spec = deploy / "spec.yaml"
    spec.write_text(
        f"model: {written}\ngpu: l4\nrequirements:\n  min_kv_tokens: 1000\n  allow_at_risk: true\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "check", str(spec), "--json"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["passed"] is True


def test_a_missing_relative_path_names_the_folder_it_looked_in(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: ./no-such-model\ngpu: l4\n")
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "check", str(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert str(tmp_path) in out.stderr and "did you mean" not in out.stderr


def test_hub_ids_and_aliases_are_left_alone(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: Qwen/Qwen3-8B\ngpu: h100-sxm\n")
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "check", str(spec), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"] == "Qwen/Qwen3-8B"
