"""`vramctl explain-oom --json LOG` run without typer (vramctl/cli/lean.py) answers exactly as the typer command does:
the same JSON, the same exit code, the same error line; every other command line still goes to typer."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vramctl.cli import main as cli_main
from vramctl.cli.lean import lean_command, lean_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROOT = Path(__file__).resolve().parents[2]


def _inputs(tmp: Path) -> list[Path]:
    logs = sorted((FIXTURES / "oom").glob("*.log"))[::9]
    empty = tmp / "empty.log"
    empty.write_bytes(b"")
    binary = tmp / "binary.log"
    binary.write_bytes(bytes(range(256)) * 300)
    utf16 = tmp / "utf16.log"
    utf16.write_bytes("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n".encode("utf-16"))
    packed = tmp / "log.gz"
    packed.write_bytes(gzip.compress(logs[0].read_bytes()))
    cut = tmp / "cut.gz"
    cut.write_bytes(gzip.compress(logs[0].read_bytes() * 50)[:-40])
    return [*logs, empty, binary, utf16, packed, cut, tmp / "missing.log", tmp]


def _run(fn: object, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int | None, str, str]:
    code = fn(argv)  # type: ignore[operator]
    out, err = capsys.readouterr()
    return code, out, err


def test_lean_answers_as_typer_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checked = 0
    for path in _inputs(tmp_path):
        for argv in (["explain-oom", "--json", str(path)], ["explain-oom", str(path), "--json"]):
            lean = _run(lean_command, argv, capsys)
            typer = _run(cli_main.main, argv, capsys)
            assert lean == typer, (argv, lean[0], typer[0], lean[2], typer[2])
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize(
    "argv",
    [
        ["explain-oom", "x.log"],  # the rich rendering: typer's command
        ["explain-oom", "--json"],
        ["explain-oom", "--json", "-"],
        ["explain-oom", "--json", "--markdown"],
        ["explain-oom", "--json", "--help"],
        ["explain-oom", "--json", "--json"],
        ["explain-oom", "--json", "x.log", "--timeline"],
        ["explain-oom", "--markdown", "x.log"],
        ["read-log", "--json", "x.log"],
        ["explain-oom", "--json", ""],
        [],
    ],
)
def test_other_command_lines_go_to_typer(argv: list[str]) -> None:
    assert lean_log(argv) is None
    assert lean_command(argv) is None


def test_lean_run_imports_no_typer() -> None:
    log = sorted((FIXTURES / "oom").glob("*.log"))[0]
    code = (
        "import sys\n"
        "from vramctl.cli.lean import lean_command\n"
        f"rc = lean_command(['explain-oom', '--json', {str(log)!r}])\n"
        "print(rc, 'typer' in sys.modules, 'click' in sys.modules, file=sys.stderr)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.stderr.split() == ["0", "False", "False"], res.stderr
    assert res.stdout.lstrip().startswith("{")
