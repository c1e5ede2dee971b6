"""`--max-num-active-seqs` (vLLM 0.31 →): admission into RUNNING, bounded by max_num_seqs, no memory term moves,
and `check`'s concurrency requirement is capped by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_no_memory_term_moves_and_the_setting_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    base = _plan(capsys, "llama-3-8b")
    capped = _plan(capsys, "llama-3-8b", "--max-num-active-seqs", "64")
    assert capped["terms"] == base["terms"] and capped["kv_tokens"] == base["kv_tokens"]
    assert capped["settings"]["max_num_active_seqs"] == 64
    assert "max_num_active_seqs" not in base["settings"]
    assert any("--max-num-active-seqs 64" in e for e in capped["explanations"])


def test_serve_command_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    d = _plan(capsys, "--", "vllm", "serve", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-num-active-seqs=32")
    assert d["settings"]["max_num_active_seqs"] == 32


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-num-active-seqs", "5000"], "cannot be greater than max_num_seqs (1024)"),
        (["--max-num-active-seqs", "64", "--engine-version", "0.30.0"], "added in 0.31.0"),
        (["--max-num-active-seqs", "0"], "--max-num-active-seqs"),
        (["--max-num-active-seqs", "8", "--engine", "sglang"], "vLLM flag"),
    ],
)
def test_refusals(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    assert main(["plan", "llama-3-8b", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_check_caps_concurrency_by_active_seqs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: t\nmodel: llama-3-8b\ngpu: h100-sxm\nengine: vllm\nflags:\n  max-model-len: 1024\n"
        "  max-num-active-seqs: 16\nrequirements:\n  min_concurrency: {context: 1024, value: 32}\n"
    )
    assert main(["check", str(spec), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert "--max-num-active-seqs" in json.dumps(out["checks"])
