"""Rules that exist once give one answer: `plan` and `check` size the vLLM host tier from the same device pool, and
`profile` resolves the same default block size as `plan` (MLA on Hopper / Blackwell)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.core.plan import default_block_size_for
from vramctl.core.settings import ServeSettings
from vramctl.measure.device import DeviceInfo
from vramctl.measure.profiler import ProfileRequest, resolve
from vramctl.registry import load_gpu, load_model


@pytest.mark.parametrize("max_model_len", ["8001", "8192", "4095"])
def test_plan_and_check_agree_on_the_vllm_host_tier(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, max_model_len: str
) -> None:
    assert main(["plan", "llama-3-8b", "--kv-offloading-size", "64", "--host-memory", "512GiB",
                 "--max-model-len", max_model_len, "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["host_tier"]
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: t\nmodel: llama-3-8b\ngpu: h100-sxm\nengine: vllm\nhost_memory: 512GiB\n"
        f"flags:\n  max-model-len: {max_model_len}\n  kv-offloading-size: 64\n"
    )
    assert main(["check", str(spec), "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)["engines"][0]["host_tier"]
    assert planned == checked


@pytest.mark.parametrize(("model", "gpu", "version", "block"), [("deepseek-v2-lite-chat", "h100-sxm", "0.33.0", 64),
                                                                  ("deepseek-v2-lite-chat", "b200", "0.33.0", 128),
                                                                  ("deepseek-v2-lite-chat", "a100-80gb", "0.33.0", 16),
                                                                  ("llama-3-8b", "h100-sxm", "0.33.0", 16),
                                                                  # 0.34: CacheConfig.DEFAULT_BLOCK_SIZE 64
                                                                  ("deepseek-v2-lite-chat", "a100-80gb", "0.34.0", 64),
                                                                  ("deepseek-v2-lite-chat", "b200", "0.34.0", 128),
                                                                  ("llama-3-8b", "h100-sxm", "0.34.0", 64)])
def test_profile_resolves_plans_block_size(model: str, gpu: str, version: str, block: int) -> None:
    spec, card = load_model(model), load_gpu(gpu)
    assert default_block_size_for(spec, card, version) == block
    info = DeviceInfo(kind="cuda", name=card.display_name, compute_capability=card.compute_capability)
    settings = ServeSettings(engine_version=version)
    resolved = resolve(ProfileRequest(spec=spec, settings=settings), info, card.cuda_total_bytes)
    assert resolved.block_size == block


def test_vramctls_own_flags_after_the_serve_command_are_honoured(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--gpu", "l40s", "--engine=both", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gpu"]["name"] == "l40s" and d["sglang"] is not None
    assert not any("ignored --gpu" in e or "ignored --engine" in e for e in d["explanations"])


def test_own_flag_twice_with_two_values_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--gpu", "h100-sxm", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--gpu", "l40s"]) == 2
    err = capsys.readouterr().err
    assert "--gpu" in err and "l40s" in err and len(err.strip().splitlines()) == 1


def test_diff_takes_json_after_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diff", "--from", "0.11.0", "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h200", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gpu"].startswith("NVIDIA H200")


def test_tiers_plan_takes_model_as_option_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiers", "plan", "--model", "qwen3-8b", "--host-memory", "512GiB", "--json"]) == 0
    by_option = json.loads(capsys.readouterr().out)
    assert main(["tiers", "plan", "qwen3-8b", "--host-memory", "512GiB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == by_option
    assert main(["tiers", "plan", "qwen3-8b", "--model", "llama-3-8b"]) == 2
    assert "two models" in capsys.readouterr().err
