"""read-log on start-up logs wrapped by a collector (Docker json-file with split pieces, journald JSON with
colour codes as byte arrays, CRI with partial lines): every logged number is read, as from the plain log.

The fixtures (tests/fixtures/wrapped/startup_*) are tests/fixtures/startup_collected/021.log (vLLM) and 019.log
(SGLang), reconstructions from the engines' format strings, wrapped the way each collector stores them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from _readlog_golden import check_logged

from vramctl.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
COLLECTED = FIXTURES / "startup_collected"
WRAPPED = FIXTURES / "wrapped"
ENTRIES = {e["log_file"]: e for e in yaml.safe_load((COLLECTED / "index.yaml").read_text())["datapoints"]}
CASES = [
    ("021.log", "startup_021.docker-split.json"),
    ("019.log", "startup_019.journal.json"),
    ("019.log", "startup_019.cri-partial.log"),
]


@pytest.mark.parametrize(("plain", "wrapped"), CASES, ids=[c[1] for c in CASES])
def test_readlog_wrapped_every_logged_number_is_read(plain: str, wrapped: str) -> None:
    entry: dict[str, Any] = {**ENTRIES[plain], "log_file": wrapped}
    check_logged(entry, WRAPPED)


def _json(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, dict[str, Any]]:
    code = main(["read-log", "--json", str(path)])
    return code, json.loads(capsys.readouterr().out)


def _without_line_numbers(obj: Any) -> Any:
    """The report with line numbers (and the file name) left out: they differ where pieces were joined."""
    if isinstance(obj, dict):
        return {
            k: _without_line_numbers(v)
            for k, v in obj.items()
            if k not in ("line", "lines", "log") and not k.endswith("_line")
        }
    if isinstance(obj, list):
        return [_without_line_numbers(v) for v in obj]
    if isinstance(obj, str):
        return re.sub(r"\blines? \d+(?:[,–-]\s*\d+)*", "line N", obj)
    return obj


@pytest.mark.parametrize(("plain", "wrapped"), CASES, ids=[c[1] for c in CASES])
def test_readlog_wrapped_report_equals_the_plain_one(
    capsys: pytest.CaptureFixture[str], plain: str, wrapped: str
) -> None:
    code_p, rep_p = _json(capsys, COLLECTED / plain)
    code_w, rep_w = _json(capsys, WRAPPED / wrapped)
    assert code_w == code_p == 0
    assert _without_line_numbers(rep_w) == _without_line_numbers(rep_p)
