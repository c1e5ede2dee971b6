"""The engine tier's wiring, checked without the engine: CI runs it after the README's test command, the plain
test run never starts a server, the marker is registered, and the scripts fail in one clear line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_test_command() -> str:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return str(blocks[1]).strip()


def test_ci_runs_the_engine_check_after_the_readme_test_command() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "scripts/engine-check.sh" in lines
    assert lines.index(_readme_test_command()) < lines.index("scripts/engine-check.sh")


def test_the_engine_marker_is_registered() -> None:
    assert re.search(r'^\s*"engine: ', (ROOT / "pyproject.toml").read_text(), flags=re.M)


def _env_without_the_tier() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VRAMCTL_ENGINE_TESTS", None)
    return env


def test_the_plain_test_run_skips_the_engine_tier_with_the_reason() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(ROOT / "tests" / "engine")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env_without_the_tier(),
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:]
    assert " passed" not in out.stdout and " failed" not in out.stdout, out.stdout[-2000:]
    assert "engine tier: runs with `pytest -m engine tests/engine`" in out.stdout


def test_the_engine_tier_without_its_environment_skips_with_the_reason(tmp_path: Path) -> None:
    env = _env_without_the_tier()
    env["VRAMCTL_ENGINE_VENV"] = str(tmp_path / "absent")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-m", "engine", "-p", "no:cacheprovider", "tests/engine"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:]
    assert f"no engine environment at {tmp_path / 'absent'}" in out.stdout


def test_engine_env_refuses_a_directory_that_is_not_a_venv_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "not-a-venv").mkdir()
    (tmp_path / "not-a-venv" / "keep.txt").write_text("mine")
    env = dict(os.environ, VRAMCTL_ENGINE_VENV=str(tmp_path / "not-a-venv"))
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "engine-env.sh")], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "is not a virtual environment" in out.stderr
    assert (tmp_path / "not-a-venv" / "keep.txt").read_text() == "mine"  # nothing of it removed


def test_engine_check_without_an_environment_exits_2_and_says_so_last(tmp_path: Path) -> None:
    (tmp_path / "not-a-venv").mkdir()
    env = dict(os.environ, VRAMCTL_ENGINE_VENV=str(tmp_path / "not-a-venv"), OUT=str(tmp_path / "out"))
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "engine-check.sh")], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 2
    assert out.stdout.strip().splitlines()[-1].startswith("engine-check: the engine environment could not be built")
    assert "is not a virtual environment" in out.stderr


def test_a_case_this_machines_engine_refuses_is_listed_not_counted(tmp_path: Path) -> None:
    """The CPU backend refuses fp8 KV on a machine without AVX-512 / AMX: the case is recorded as refused (its
    line), not failed and not faked, and the summary counts the others."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "engine"))
    try:
        import engine_harness as harness
        import engine_report
    finally:
        sys.path.pop(0)
    log = tmp_path / "fp8.log"
    log.write_text(
        "(EngineCore pid=1) ERROR [core.py:1510] RuntimeError: Worker failed with error 'FP8 KV cache on CPU "
        "requires x86 with AVX-512 or AMX.', please check the stack trace above for the root cause\n"
    )
    run = harness.EngineRun(name="fp8", argv=[], env={}, log_path=log, port=0, started=False)
    assert harness.platform_refusal(run) == "FP8 KV cache on CPU requires x86 with AVX-512 or AMX"
    assert harness.platform_refusal(harness.EngineRun("x", [], {}, log, 0, started=True)) is None
    other = tmp_path / "other.log"
    other.write_text("RuntimeError: CUDA out of memory\n")
    assert harness.platform_refusal(harness.EngineRun("y", [], {}, other, 0)) is None
    data = {
        "engine_version": "0.32.0",
        "tests": [
            {"nodeid": "tests/engine/test_engine_kv.py::a", "outcome": "passed"},
            {"nodeid": "tests/engine/test_engine_kv.py::b", "outcome": "refused", "message": harness.REFUSED + " x"},
        ],
    }
    lines, agree, counted, _bad = engine_report.summarise(data, 0, 1)
    assert (agree, counted) == (1, 1)
    assert any("Refused by this machine's engine" in line for line in lines)
