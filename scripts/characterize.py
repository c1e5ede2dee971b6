#!/usr/bin/env python3
"""The characterization corpus (tests/characterization): run every case and compare its output with the stored one,
or `--write` the outputs anew after a change made on purpose (then list it in CHANGELOG.md).

Usage: python scripts/characterize.py [--write] [CASE_ID ...]
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "characterization"


def load_cases() -> list[dict[str, Any]]:
    data = yaml.safe_load((CORPUS / "cases.yaml").read_text())
    return list(data["cases"])


def expected_path(case: dict[str, Any]) -> Path:
    suffix = ".txt" if case.get("format") == "text" else ".json"
    return CORPUS / "expected" / f"{case['id']}{suffix}"


def run_case(case: dict[str, Any]) -> str:
    """The case's output as stored: `exit N` and the command's output (JSON re-indented with sorted keys is not
    used: key order is part of the contract, so the text is kept as printed)."""
    from vramctl.cli.main import main

    argv = [str(a) for a in case["argv"]]
    if case.get("format", "json") == "json":
        # before a pasted serve command: after `--` every word is the engine's
        at = argv.index("--") if "--" in argv else len(argv)
        argv.insert(at, "--json")
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)  # example paths are relative to the project
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(cwd)
    text = out.getvalue()
    if case.get("format", "json") == "json" and text.strip():
        json.loads(text)  # a case must print one JSON object
    return f"exit {code}\n{text}{err.getvalue()}"


def main_cli(argv: list[str]) -> int:
    write = "--write" in argv
    wanted = {a for a in argv if not a.startswith("-")}
    changed = 0
    for case in load_cases():
        if wanted and case["id"] not in wanted:
            continue
        path = expected_path(case)
        actual = run_case(case)
        old = path.read_text() if path.exists() else None
        if old == actual:
            continue
        changed += 1
        print(f"{'wrote' if write else 'differs'}: {case['id']}")
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual)
    if not changed:
        print("characterization: every case as stored")
    return 1 if changed and not write else 0


if __name__ == "__main__":
    sys.exit(main_cli(sys.argv[1:]))
