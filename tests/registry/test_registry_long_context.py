"""Long context: --hf-overrides, --rope-scaling, YaRN from the command and the config, VLLM_ALLOW_LONG_MAX_MODEL_LEN,
and the cards the registry refuses or fixed (unified memory, the A100 80GB totals)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vramctl.core.errors import BadInputError
from vramctl.registry import load_gpu, load_model
from vramctl.registry.overrides import merged_config, parse_overrides, touches_weights

YARN = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}}


def _plan(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_yarn_override_raises_the_derived_length_and_keeps_the_weights() -> None:
    base = load_model("llama-3-8b")
    spec = load_model("llama-3-8b", hf_overrides=YARN)
    assert base.vllm_max_model_len == 8192
    assert spec.vllm_max_model_len == 32768
    assert spec.weight_bytes == base.weight_bytes and spec.param_count == base.param_count
    assert "hf_overrides" in dict(spec.sources)


def test_an_override_of_shapes_recomputes_the_weights() -> None:
    base = load_model("llama-3-8b")
    spec = load_model("llama-3-8b", hf_overrides={"num_hidden_layers": 16})
    assert spec.num_hidden_layers == 16 and spec.weight_bytes < base.weight_bytes
    assert touches_weights({"num_hidden_layers": 16}) and not touches_weights(YARN)


def test_merge_replaces_keys_and_updates_sub_configs() -> None:
    config = {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}, "text_config": {"a": 1, "b": 2}}
    out = merged_config(config, {"rope_scaling": {"rope_type": "yarn"}, "text_config": {"b": 3}})
    assert out["rope_scaling"] == {"rope_type": "yarn"} and out["text_config"] == {"a": 1, "b": 3}
    assert parse_overrides('{"rope_type": "dynamic", "factor": 2}', "--rope-scaling") == {
        "rope_scaling": {"rope_type": "dynamic", "factor": 2}
    }
    with pytest.raises(BadInputError, match="not a JSON object"):
        parse_overrides("{rope", "--hf-overrides")
    with pytest.raises(BadInputError, match="expected a JSON object"):
        parse_overrides("[1, 2]")


def test_cli_long_context_paths() -> None:
    refused = _plan("llama-3-8b", "--max-model-len", "32768")
    assert refused.returncode == 2 and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in refused.stderr
    # vLLM ≤ 0.29 scales yarn's original_max_position_embeddings; from 0.30 yarn is unscaled
    # (vllm/config/model.py:2468-2492, 0.30.0), so the override must raise max_position_embeddings itself
    ok = _plan("llama-3-8b", "--engine-version", "0.29.0", "--max-model-len", "32768", "--hf-overrides",
               json.dumps(YARN), "--json")
    assert ok.returncode in (0, 1), ok.stderr
    assert json.loads(ok.stdout)["settings"]["max_model_len"] == 32768
    unscaled = _plan("llama-3-8b", "--max-model-len", "32768", "--hf-overrides", json.dumps(YARN))
    assert unscaled.returncode == 2 and "from vLLM 0.30 max_position_embeddings" in unscaled.stderr
    both = _plan("llama-3-8b", "--max-model-len", "32768", "--json", "--hf-overrides",
                 json.dumps({**YARN, "max_position_embeddings": 32768}))
    assert both.returncode in (0, 1), both.stderr
    assert json.loads(both.stdout)["settings"]["max_model_len"] == 32768
    pasted = _plan(
        "--json",
        "--",
        "vllm",
        "serve",
        "llama-3-8b",
        "--max-model-len",
        "32768",
        "--rope-scaling",
        json.dumps({"rope_type": "dynamic", "factor": 4.0}),
    )
    assert pasted.returncode in (0, 1), pasted.stderr
    env_prefix = _plan(
        "--json",
        "--",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
        "vllm",
        "serve",
        "llama-3-8b",
        "--max-model-len",
        "32768",
    )
    assert env_prefix.returncode in (0, 1), env_prefix.stderr
    from_env = _plan(
        "llama-3-8b", "--max-model-len", "32768", "--json", env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    )
    assert from_env.returncode in (0, 1), from_env.stderr


@pytest.mark.parametrize("name", ["jetson-agx-orin", "NVIDIA Jetson Thor", "dgx-spark", "orin"])
def test_unified_memory_boards_are_refused_in_one_line(name: str) -> None:
    with pytest.raises(BadInputError, match=r"unified memory.*--gpu-memory"):
        load_gpu(name)


def test_a100_80gb_totals_sxm4_and_pcie() -> None:
    gib = 2**30
    assert round(load_gpu("NVIDIA A100-SXM4-80GB").cuda_total_bytes / gib, 2) == 79.15
    assert round(load_gpu("NVIDIA A100 80GB PCIe").cuda_total_bytes / gib, 2) == 79.25


@pytest.mark.parametrize(
    "name",
    [
        "a30",
        "l40",
        "l20",
        "gh200",
        "gb200",
        "b300",
        "rtx-6000-ada",
        "rtx-pro-6000",
        "rtx-3060",
        "rtx-4070-ti-super",
        "rtx-5080",
        "rtx-2080-ti",
        "mi250",
        "mi355x",
        "NVIDIA GeForce RTX 4070",
        "AMD Instinct MI355X",
    ],
)
def test_new_cards_resolve(name: str) -> None:
    gpu = load_gpu(name)
    assert gpu.cuda_total_bytes > 0 and gpu.compute_capability
