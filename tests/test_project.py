"""Project-level contracts: the README's two set-up commands, CI, layering, lint and types, exit codes."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vramctl.core.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parent.parent
PURE_PACKAGES = ("core", "diagnose", "tiers", "registry")
BANNED = ("torch", "typer", "rich", "pynvml")


def _bash_blocks(markdown: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", markdown, flags=re.S)]


def test_readme_has_exactly_two_setup_commands() -> None:
    blocks = _bash_blocks((ROOT / "README.md").read_text())
    assert len(blocks) == 2, blocks
    install_and_plan, install_and_test = blocks
    assert install_and_plan.endswith("vramctl plan")
    assert "pytest" in install_and_test


def test_ci_runs_the_readme_test_command() -> None:
    test_command = _bash_blocks((ROOT / "README.md").read_text())[1]
    ci_script = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci_script.splitlines()


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_pure_layers_import_no_torch_typer_rich_or_pynvml(package: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "vramctl" / package).rglob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] in BANNED
    ]
    assert not offenders, offenders


def test_cli_import_does_not_import_torch() -> None:
    code = "import sys, vramctl.cli.main; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_ruff_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_exit_codes_are_documented() -> None:
    doc = (ROOT / "docs" / "exit-codes.md").read_text()
    for code in ExitCode:
        assert re.search(rf"^\|\s*{code.value}\s*\|\s*`{code.name}`", doc, flags=re.M), code


def test_changelog_follows_keep_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text
    assert "keepachangelog.com" in text
