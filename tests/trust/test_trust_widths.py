"""Issue 12, item 7: readable at 80 columns for every command; piped output is COLUMNS wide, else 80."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from vramctl.render.console import PIPED_WIDTH, output_width

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = [
    ["plan", "Qwen/Qwen3-8B", "--gpu", "rtx-4090", "--max-model-len", "32768"],
    ["plan", "--engine", "both"],
    ["plan", "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "131072", "--engine", "sglang"],
    ["check", "examples/deploy-llama3-8b-h100-too-ambitious.yaml"],
    ["check", "examples/deploy-llama3-8b-h100-both.yaml"],
    ["models"],
    ["models", "qwen3-8b"],
    ["gpus"],
    ["gpus", "h100-sxm"],
    ["read-log", "examples/vllm-startup.log", "--compare-plan"],
    ["explain-oom", "examples/vllm-oom.log"],
    ["tiers", "plan", "llama-3-8b", "--gpu", "h100-sxm"],
    ["tiers", "simulate", "--trace", "examples/chat-trace.jsonl", "--gpu-capacity", "2e4"],
    ["tiers", "bench", "--block-bytes", "256KiB", "--size", "8MiB", "--repeat", "1", "--skip-device"],
]


def _run(argv: list[str], columns: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a[:2]) for a in COMMANDS])
def test_every_command_is_readable_at_80_columns(argv: list[str]) -> None:
    text = _run(argv, "80")
    lines = text.splitlines()
    assert lines
    assert max(cell_len(line) for line in lines) <= 80, max(lines, key=cell_len)
    assert "…" not in text, next(line for line in lines if "…" in line)  # nothing cut


@pytest.mark.parametrize("argv", [COMMANDS[0], COMMANDS[3], COMMANDS[5], COMMANDS[10]], ids=lambda a: a[0])
def test_piped_output_is_80_wide_without_columns_and_follows_columns(argv: list[str]) -> None:
    default = _run(argv, None).splitlines()
    assert max(cell_len(line) for line in default) <= PIPED_WIDTH == 80
    wide = _run(argv, "200").splitlines()
    assert max(cell_len(line) for line in wide) > 80  # the same command uses the room it is given


def test_output_width_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    class Pipe:
        def isatty(self) -> bool:
            return False

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("COLUMNS", raising=False)
    assert output_width(Pipe()) == 80
    assert output_width(Tty()) is None  # rich measures the terminal
    monkeypatch.setenv("COLUMNS", "132")
    assert output_width(Pipe()) == 132 and output_width(Tty()) == 132
    monkeypatch.setenv("COLUMNS", "junk")
    assert output_width(Pipe()) == 80
