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


def test_command_env_prefixes_reach_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`VAR=value` in a spec's `command:` is honoured as `vramctl plan -- …` honours it."""
    plain = tmp_path / "plain.yaml"
    plain.write_text(
        "gpu: h100-sxm\ncommand: python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-8B-Instruct\n"
    )
    post = tmp_path / "post.yaml"
    post.write_text(
        "gpu: h100-sxm\ncommand: SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 python -m sglang.launch_server "
        "--model-path meta-llama/Meta-Llama-3-8B-Instruct\n"
    )
    fractions = []
    for spec in (plain, post):
        assert main(["check", str(spec), "--json"]) == 0
        text = capsys.readouterr().out
        data = json.loads(text)
        fractions.append(data["engines"][0]["utilization"])
    assert fractions == [0.83, 0.98]  # sglang.md §1.7: default vs post-capture
    no_graph = tmp_path / "nograph.yaml"
    no_graph.write_text(
        "gpu: h100-sxm\ncommand: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 vllm serve "
        "meta-llama/Meta-Llama-3-8B-Instruct --max-model-len 8192\n"
    )
    graph = tmp_path / "graph.yaml"
    graph.write_text(
        "gpu: h100-sxm\ncommand: vllm serve meta-llama/Meta-Llama-3-8B-Instruct --max-model-len 8192\n"
    )
    tokens = []
    for spec in (graph, no_graph):
        assert main(["check", str(spec), "--json"]) == 0
        tokens.append(json.loads(capsys.readouterr().out)["engines"][0]["kv_tokens"])
    assert tokens[1] > tokens[0]  # the graph estimate is no longer subtracted
