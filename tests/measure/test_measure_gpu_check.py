"""scripts/gpu-check.sh without a GPU: exit 4, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
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
        env={**os.environ, "OUT": str(out), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 4
    assert "no CUDA device" in result.stderr
    assert not out.exists()


def _dry_env(out: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "OUT": str(out),
        "PYTHON": sys.executable,  # this interpreter, not whatever python3 is first on PATH
        "GPU_CHECK_DEVICE": "cpu",
        "GPU_CHECK_DENSE_MODEL": "profiles/measured/tiny-llama",
        "GPU_CHECK_MOE_MODEL": "no-such-org/no-such-moe",
        "GPU_CHECK_ARGS": "--device-memory 1GiB --dtype float32 --max-num-batched-tokens 256",
        **extra,
    }


def test_dry_run_reports_partial_results_when_a_step_fails(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = _dry_env(out, GPU_CHECK_STEPS="profile-llama suggest-llama profile-moe")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    report = (out / "gpu-check-report.md").read_text()
    assert "| profile-llama | 0 |" in report and "| suggest-llama | 0 |" in report
    assert "| profile-moe | 2 |" in report
    # the steps that passed still have their numbers; the failed one its stderr
    assert "## profile-llama: profiles/measured/tiny-llama" in report and "goal < 20 s: met" in report
    assert "--kv-cache-memory-bytes=" in report
    # an org/name that is not bundled is a Hub repo; offline (tests/conftest.py) it is not in the HF cache
    assert "no-such-org/no-such-moe: config.json is not in the HF cache" in report
    assert report.rstrip().endswith("**FAIL (1 step(s) failed or skipped)**")
    assert (out / "gpu-check-raw" / "llama.json").exists()


def test_spent_budget_skips_steps_and_still_reports(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        env=_dry_env(out, GPU_CHECK_BUDGET_S="0"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    report = (out / "gpu-check-report.md").read_text()
    for name in ("pytest-gpu", "profile-llama", "validate-llama", "profile-moe", "tiers-bench"):
        assert f"| {name} | skipped |" in report
    assert "FAIL (6 step(s) failed or skipped)" in report


def test_sigterm_stops_the_step_and_writes_the_partial_report(tmp_path: Path) -> None:
    import signal
    import time

    out = tmp_path / "out"
    fake = tmp_path / "fake-vramctl"
    marker = tmp_path / "started"
    fake.write_text(f"#!/usr/bin/env bash\ntouch {marker}\nexec sleep 300\n")
    fake.chmod(0o755)
    env = _dry_env(out, GPU_CHECK_STEPS="profile-llama suggest-llama", VRAMCTL=str(fake))
    proc = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 20  # not the step's 90 s limit
    assert proc.returncode == 1
    assert "interrupted" in err
    report = (out / "gpu-check-report.md").read_text()
    assert "| profile-llama | interrupted |" in report and "suggest-llama" not in report
    assert "PARTIAL (interrupted by TERM" in report


def test_dry_run_needs_no_installed_entry_point(tmp_path: Path) -> None:
    """A GPU machine with no network cannot `pip install -e .`: the script runs the checkout itself as
    `python -m vramctl`, with no `vramctl` on PATH and from another working directory."""
    import sys

    out = tmp_path / "out"
    bare_path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "vramctl").exists()
    )
    env = _dry_env(out, GPU_CHECK_STEPS="profile-llama suggest-llama", PATH=bare_path, PYTHON=sys.executable)
    env.pop("VRAMCTL", None)
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = (out / "gpu-check-report.md").read_text()
    assert f"`{sys.executable} -m vramctl profile profiles/measured/tiny-llama" in report
    assert "| suggest-llama | 0 |" in report and report.rstrip().endswith("**PASS**")


def test_a_python_without_the_needed_packages_is_named_before_any_step(tmp_path: Path) -> None:
    import sys

    out = tmp_path / "out"
    bare_python = tmp_path / "bare-python"
    # -S: no site-packages, so torch, typer, rich, yaml, pytest and hypothesis are all missing
    bare_python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare_python.chmod(0o755)
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")],
        env={**_dry_env(out), "PYTHON": str(bare_python)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"gpu-check: {bare_python} lacks: torch typer rich yaml pytest hypothesis (install them, or carry "
        "their wheels: docs/gpu-check.md)"
    ]
    assert not out.exists()
