"""Issue 12, item 3: answers that paste — flag values without thousands separators, flags spelled as the
engines spell them, JSON numbers as numbers — across plan, check, read-log and tiers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vramctl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
FLAG_WITH_SEPARATOR = re.compile(r"--[a-z][a-z-]+[ =][0-9]{1,3}(,[0-9]{3})+\b")
NUMBER_AS_STRING = re.compile(r'"-?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?"')
STARTUP_LOGS = sorted((ROOT / "tests" / "fixtures" / "startup_collected").glob("*.log"))[:6]

COMMANDS = [
    ["plan", "Qwen/Qwen3-8B", "--gpu", "rtx-4090", "--max-model-len", "40960"],
    ["plan", "Qwen/Qwen3-8B", "--gpu", "rtx-4090", "--max-model-len", "32768", "--engine", "both"],
    ["plan", "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "131072"],
    ["plan", "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "131072", "--engine", "sglang"],
    ["plan", "--free-memory", "60GiB"],
    ["plan", "--kv-cache-memory-bytes", "70GiB"],
    ["check", str(ROOT / "examples" / "deploy-llama3-8b-h100-too-ambitious.yaml")],
    ["check", str(ROOT / "examples" / "deploy-llama3-8b-h100-both.yaml")],
    ["tiers", "plan", "llama-3-8b", "--gpu", "h100-sxm"],
    ["tiers", "simulate", "--trace", str(ROOT / "examples" / "chat-trace.jsonl"), "--gpu-capacity", "2e4"],
    *(["read-log", str(log), "--compare-plan"] for log in STARTUP_LOGS),
]


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a[:3]) for a in COMMANDS])
@pytest.mark.parametrize("as_json", [False, True])
def test_flag_values_and_json_numbers_paste(
    argv: list[str], as_json: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one line per sentence: a wrapped flag would hide from the pattern
    code = main([*argv, *(["--json"] if as_json else [])])
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert not FLAG_WITH_SEPARATOR.search(out), FLAG_WITH_SEPARATOR.search(out)
    if as_json and code != 2:  # 2: a log whose model is not here (its error line is checked above)
        json.loads(captured.out)
        assert not NUMBER_AS_STRING.search(out), NUMBER_AS_STRING.search(out)


def test_check_names_the_length_flag_with_a_pasteable_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "long.yaml"
    spec.write_text(
        "model: llama-3-8b\ngpu: h100-sxm\nflags:\n  max-model-len: 8192\n"
        "requirements:\n  min_concurrency: {context: 16384, value: 2}\n  min_kv_tokens: 2000000\n"
    )
    assert main(["check", str(spec), "--json"]) == 1
    checks = {c["requirement"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert "--max-model-len 8192:" in checks["min_concurrency@16384"]["message"]
    assert checks["min_kv_tokens"]["required"] == "≥ 2000000"
    assert "-tp " not in checks["min_kv_tokens"]["message"]
