"""Issue 12, items 6 and 9: a clean install and tests that stand alone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache", ".pytest_cache"
)


def _bare_env() -> dict[str, str]:
    """No virtualenv on PATH: only this interpreter, by its full path, runs anything."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project copied where no ../shared lies beside it."""
    where = tmp_path_factory.mktemp("alone") / "vramctl"
    shutil.copytree(ROOT, where, ignore=IGNORE)
    assert not (where.parent / "shared").exists()
    return where


def test_the_suite_collects_from_a_clone_without_shared(clone: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=clone,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "error" not in result.stdout.lower().split("tests collected")[-1], result.stdout[-2000:]


def test_tests_that_need_shared_skip_and_say_so(clone: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/diagnose/test_oom_samples.py",
            "tests/diagnose/test_oom_cli.py",
            "tests/readlog/test_readlog_cli.py",
            "tests/sglang/test_sglang_samples.py",
            "tests/test_project.py::test_ruff_is_clean",
        ],
        cwd=clone,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert "needs ../shared/samples/oom" in result.stdout
    assert "needs ../shared/samples/startup" in result.stdout
    assert re.search(r"\d+ passed", result.stdout), result.stdout[-2000:]  # the rest of those modules runs


def test_only_the_test_extra_pins_torch() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "torch==2.13.0" in extras["test"]
    import torch

    installed = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    for extra in ("measure", "gpu"):
        (spec,) = [d for d in extras[extra] if d.startswith("torch")]
        assert "==" not in spec, f"{extra}: {spec} would replace an engine's torch"
        low = re.search(r">=\s*([\d.]+)", spec)
        high = re.search(r"<\s*([\d.]+)", spec)
        assert low is not None
        assert installed >= tuple(int(x) for x in low.group(1).split(".")[:2]), spec
        assert high is None or installed < tuple(int(x) for x in [*high.group(1).split("."), "0"][:2]), spec


def test_readme_states_python_and_tool_installs() -> None:
    text = (ROOT / "README.md").read_text()
    assert "Python ≥ 3.11" in text
    assert "pipx install" in text and "uv tool install" in text
    assert "--install-completion" in text and "--version" in text
    # exactly the two set-up commands CI runs
    assert text.count("```bash\n") == 2
    assert (
        "pip install -e . && vramctl plan" in text
        and "pip install -e '.[test]' && python -m pytest -q" in text
    )


def test_version_and_completion() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"vramctl {version}"
    script = subprocess.run(
        [sys.executable, "-m", "vramctl", "--show-completion", "bash"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1",
        },  # typer's switch: name the shell
    )
    assert script.returncode == 0 and "complete" in script.stdout
