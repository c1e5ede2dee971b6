"""The engines' hybrid-state flags reach the plan from serve commands and check specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main

NEMOTRON = "nvidia/NVIDIA-Nemotron-Nano-9B-v2"
QWEN_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    assert main(["plan", "--json", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_vllm_mamba_ssm_cache_dtype_overrides_nemotrons_float32_hook(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nemotron-H's hook turns `auto` into float32 (1,312-token blocks on one H100); a bfloat16 SSM state is
    half the bytes, so the unified block halves too (672 = the smallest multiple of 16 holding the page)."""
    v033 = ("--engine-version", "0.33.0")
    hooked = _plan(capsys, "--gpu", "h100-sxm", *v033, "--", "vllm", "serve", NEMOTRON)
    halved = _plan(
        capsys, "--gpu", "h100-sxm", *v033, "--", "vllm", "serve", NEMOTRON, "--mamba-ssm-cache-dtype", "bfloat16"
    )
    assert (hooked["block_size"], halved["block_size"]) == (1312, 672)
    assert halved["kv_tokens"] > hooked["kv_tokens"]
    # 0.34 aligns to its default block of 64 (max(kernel alignment, cache_config.block_size),
    # vllm/platforms/interface.py:1079-1086): the smallest multiples of 64 holding the pages
    hooked = _plan(capsys, "--gpu", "h100-sxm", "--", "vllm", "serve", NEMOTRON)
    halved = _plan(
        capsys, "--gpu", "h100-sxm", "--", "vllm", "serve", NEMOTRON, "--mamba-ssm-cache-dtype", "bfloat16"
    )
    assert (hooked["block_size"], halved["block_size"]) == (1344, 704)


def test_sglang_mamba_flags(capsys: pytest.CaptureFixture[str]) -> None:
    head = ["--gpu", "h200", "--engine", "sglang", "--", "python", "-m", "sglang.launch_server"]
    model = ["--model-path", QWEN_NEXT, "--tp", "4"]
    default = _plan(capsys, *head, *model)["sglang"]["mamba"]
    given = _plan(capsys, *head, *model, "--max-mamba-cache-size", "512", "--disable-radix-cache")["sglang"][
        "mamba"
    ]
    assert (default["source"], default["mamba_ratio"]) == ("ratio", 3)
    assert (given["source"], given["max_mamba_cache_size"], given["mamba_ratio"]) == ("given", 512, 1)
    assert given["mamba_pool_bytes"] == 512 * given["mamba_cache_per_req_bytes"]


def test_check_spec_takes_the_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "deploy.yaml"
    spec.write_text(
        f"model: {NEMOTRON}\ngpu: h100-sxm\nengine: vllm\nflags:\n  mamba-ssm-cache-dtype: bfloat16\n"
        "  max-model-len: 8192\n"
    )
    assert main(["check", str(spec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engines"][0]["kv_tokens"] > 0
