"""Audit of issue 2 item 8: a host tier that cannot be pinned fails `must_fit` (the server would not start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main

SPEC = """\
model: llama-3-8b
gpu: h100-sxm
engine: {engine}
host_memory: {host}
flags:
{flags}
requirements:
  must_fit: true
"""
SGLANG = "  mem-fraction-static: 0.9\n  max-total-tokens: 445632\n  hicache-ratio: 2"
VLLM = "  kv-offloading-size: 200"


@pytest.mark.parametrize(
    ("engine", "flags", "host", "code", "verdict"),
    [
        ("sglang", SGLANG, "256GiB", 0, "fits"),
        ("sglang", SGLANG, "100GiB", 1, "host-pinned-memory-failure"),
        ("vllm", VLLM, "512GiB", 0, "fits"),
        ("vllm", VLLM, "64GiB", 1, "host-pinned-memory-failure"),
    ],
)
def test_host_tier_failure_fails_must_fit(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    engine: str,
    flags: str,
    host: str,
    code: int,
    verdict: str,
) -> None:
    spec = tmp_path / "deploy.yaml"
    spec.write_text(SPEC.format(engine=engine, flags=flags, host=host))
    assert main(["check", str(spec), "--json"]) == code
    data = json.loads(capsys.readouterr().out)
    text = json.dumps(data)
    assert f'"{verdict}"' in text
    if code:
        assert "--hicache-ratio 2" in text or "--kv-offloading-size 200" in text
