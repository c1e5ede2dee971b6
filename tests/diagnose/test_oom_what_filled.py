"""A not-oom answer's `what` names what the line said: its placeholders are filled, never printed as `{name}`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main

LOGS = {
    "error-log-line": (
        "INFO 12-01 10:00:00 api_server.py:100] Starting vLLM API server\n"
        "ERROR 12-01 10:00:05 serving_chat.py:200] Error in preprocessing prompt inputs\n",
        "Error in preprocessing prompt inputs",
    ),
    "process-ended": ("INFO starting the server\nAborted (core dumped)\n", "Aborted (core dumped)"),
}


@pytest.mark.parametrize("name", sorted(LOGS))
def test_what_is_filled_from_the_line(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, said = LOGS[name]
    log = tmp_path / "server.log"
    log.write_text(text)
    assert main(["explain-oom", str(log), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["cause"] == "not-oom"
    assert said in answer["what"] and "{" not in answer["what"]
