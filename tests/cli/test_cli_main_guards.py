"""main()'s last guards: a closed stdout is an error, and an error line stays bounded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vramctl.cli.main import MAX_ERROR_CHARS, main


def test_closed_stdout_is_an_error_not_a_silent_success() -> None:
    code = "from vramctl.cli.main import main; import sys; sys.exit(main(['plan']))"
    proc = subprocess.run(
        f'{sys.executable} -c "{code}" >&-',
        shell=True,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "vramctl: error: standard output is closed: nowhere to write the answer"


def test_a_huge_argument_makes_a_bounded_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--engine", "x" * 100_000]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < MAX_ERROR_CHARS + 200
    assert "characters cut" in err and err.startswith("vramctl: error: --engine 'xxx")
