"""A `--speculative-config` draft model read from the Hub: the real huggingface_hub against the loopback server
(fake_hub.py) via HF_ENDPOINT, as tests/registry/test_registry_hub.py does for the target. No test reaches the
internet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("huggingface_hub")

from fake_hub import FakeHub

TARGET = "meta-llama/Llama-3.1-8B-Instruct"
DRAFT = "RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic"


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    with FakeHub() as server:
        yield server


def _env(endpoint: str, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


def _plan(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", *args, "--gpu", "h100-sxm", "--max-model-len", "8192", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _weights(proc: subprocess.CompletedProcess[str]) -> tuple[int, dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return int(data["terms"]["weights"]["bytes"]), data


def _config(model: str) -> str:
    return json.dumps({"model": model, "num_speculative_tokens": 3})


def test_a_hub_draft_is_fetched_counted_and_cached(hub: FakeHub, tmp_path: Path) -> None:
    env = _env(hub.endpoint, tmp_path)
    alone, _ = _weights(_plan(env, DRAFT))
    target, plain = _weights(_plan(env, TARGET))
    both, data = _weights(_plan(env, TARGET, "--speculative-config", _config(DRAFT)))
    # draft_model: the whole FP8 checkpoint from its headers (and its rotary cache), as when it is planned alone
    assert both - target == alone
    assert data["settings"]["speculative"]["draft_model"] == DRAFT
    assert (plain["kv_bytes_per_token"], data["kv_bytes_per_token"]) == (131_072, 163_840)
    # the next run reads the draft from the HF cache: offline, with the Hub unreachable
    again, _ = _weights(_plan(_env("http://127.0.0.1:9", tmp_path, HF_HUB_OFFLINE="1"), TARGET,
                              "--speculative-config", _config(DRAFT)))
    assert again == both


def test_a_gated_hub_draft_without_a_token_is_one_line_exit_2(hub: FakeHub, tmp_path: Path) -> None:
    proc = _plan(_env(hub.endpoint, tmp_path), TARGET, "--speculative-config", _config("gated-org/Gated-1B"))
    assert proc.returncode == 2, proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "--speculative-config model 'gated-org/Gated-1B'" in lines[0] and "HF_TOKEN" in lines[0]
