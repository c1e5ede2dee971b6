"""`vramctl plan --json` stays torch-free (a subprocess, so other tests' imports do not count)."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = (
    "import sys, io, contextlib\n"
    "from vramctl.cli.main import main\n"
    "buf = io.StringIO()\n"
    "with contextlib.redirect_stdout(buf):\n"
    "    code = main(['plan', '--json'])\n"
    "heavy = sorted(m for m in ('torch', 'numpy', 'pynvml', 'matplotlib') if m in sys.modules)\n"
    "print(code, ','.join(heavy) or '-')\n"
)


def test_plan_json_imports_no_torch() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    code, heavy = proc.stdout.split()
    assert code == "0"
    assert heavy == "-", f"plan --json imported {heavy}"


def test_plan_json_is_one_object() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vramctl.cli.main", "plan", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), dict)
