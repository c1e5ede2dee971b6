"""DeepSeek-V3.2 (DSA) bundled: the profile, vLLM's and SGLang's KV geometry, hand-computed from the config.

Every expected number is worked from the config fields (61 layers, kv_lora_rank 512, qk_rope_head_dim 64,
index_head_dim 128, index_n_heads 64, index_topk 2048), not copied from vramctl's output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from vramctl.cli.main import main
from vramctl.core.params import param_count_from_spec, weight_bytes_from_spec
from vramctl.registry import load_model

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "profiles" / "models" / "deepseek-v3.2.yaml"
CFG = yaml.safe_load(PROFILE.read_text())["config"]
LAYERS = CFG["num_hidden_layers"]
LATENT = CFG["kv_lora_rank"] + CFG["qk_rope_head_dim"]  # 576 values per token and layer
INDEXER = CFG["index_head_dim"] + CFG["index_head_dim"] // 128 * 4  # 128 FP8 keys + one float32 scale = 132 B
FP8_DS_MLA = CFG["kv_lora_rank"] + CFG["kv_lora_rank"] // 128 * 4 + CFG["qk_rope_head_dim"] * 2  # 656 B


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", "--model", "deepseek-v3.2", *args, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_the_profile_round_trips_and_both_names_answer() -> None:
    spec = load_model("deepseek-ai/DeepSeek-V3.2")
    assert load_model("deepseek-ai/DeepSeek-V3.2-Exp") == spec == load_model("deepseek-v3.2-exp")
    assert spec.architecture == "DeepseekV32ForCausalLM"
    assert spec.mla is not None
    assert (spec.mla.indexer_head_dim, spec.mla.indexer_heads, spec.mla.indexer_topk) == (128, 64, 2048)
    # the profile's counts are the formula's (no drift between the YAML and params.py)
    assert spec.param_count == param_count_from_spec(spec)
    assert spec.weight_bytes == weight_bytes_from_spec(spec)


def test_the_indexer_parameters_are_counted() -> None:
    """V3.2 = V3 + per layer wq_b (q_lora_rank → heads × head_dim) + wk (hidden → head_dim) + weights_proj
    (hidden → heads) + k_norm weight and bias."""
    v3 = load_model("deepseek-v3")
    hidden, q_lora, heads, head_dim = (
        CFG["hidden_size"],
        CFG["q_lora_rank"],
        CFG["index_n_heads"],
        CFG["index_head_dim"],
    )
    per_layer = q_lora * heads * head_dim + hidden * head_dim + hidden * heads + 2 * head_dim
    assert per_layer == 13_959_424
    assert load_model("deepseek-v3.2").param_count == v3.param_count + LAYERS * per_layer
    # bytes as vLLM loads them: wq_b block-FP8 (1 B + a float32 per 128 × 128 block), wk / weights_proj bf16
    # (vLLM's fused wk_weights_proj has no quant config), k_norm float32
    wq_b = q_lora * heads * head_dim + 4 * (heads * head_dim // 128) * (q_lora // 128)
    per_layer_bytes = wq_b + 2 * hidden * head_dim + 2 * hidden * heads + 4 * 2 * head_dim
    assert load_model("deepseek-v3.2").weight_bytes == v3.weight_bytes + LAYERS * per_layer_bytes


def test_vllm_kv_is_latent_plus_indexer_per_layer(capsys: pytest.CaptureFixture[str]) -> None:
    out = _plan(capsys, "--gpu", "h200", "-tp", "8")
    assert out["kv_bytes_per_token"] == LAYERS * (LATENT * 2 + INDEXER) == 78_324
    assert out["bytes_per_block"] == out["block_size"] * out["kv_bytes_per_token"]
    assert out["num_blocks"] == out["kv_cache_bytes"] // out["bytes_per_block"]
    assert out["kv_tokens"] == out["num_blocks"] * out["block_size"]
    assert sum(term["bytes"] for term in out["terms"].values()) == out["capacity_bytes"]


def test_vllm_fp8_is_the_packed_ds_mla_layout(capsys: pytest.CaptureFixture[str]) -> None:
    out = _plan(capsys, "--gpu", "h200", "-tp", "8", "--kv-cache-dtype", "fp8")
    assert out["kv_bytes_per_token"] == LAYERS * (FP8_DS_MLA + INDEXER) == 48_068


def test_vllm_books_the_top_k_buffer_with_the_weights(capsys: pytest.CaptureFixture[str]) -> None:
    """`topk_indices_buffer` = max_num_batched_tokens × index_topk int32, built with the model on every rank."""
    small = _plan(capsys, "--gpu", "h200", "-tp", "8", "--max-num-batched-tokens", "8192")
    large = _plan(capsys, "--gpu", "h200", "-tp", "8", "--max-num-batched-tokens", "16384")
    grown = large["terms"]["weights"]["bytes"] - small["terms"]["weights"]["bytes"]
    assert grown == (16384 - 8192) * CFG["index_topk"] * 4
    assert "indexer top-k buffer 64 MiB" in small["terms"]["weights"]["formula"]
    assert "top-k" not in _plan_other(capsys, "deepseek-v3")["terms"]["weights"]["formula"]


def _plan_other(capsys: pytest.CaptureFixture[str], model: str) -> dict[str, Any]:
    assert main(["plan", "--model", model, "--gpu", "h200", "-tp", "8", "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@pytest.mark.parametrize(
    ("gpu", "extra", "version", "per_layer"),
    [
        # Hopper: auto → bfloat16, 576 × 2 + the indexer
        ("h200", (), "0.5.18", LATENT * 2 + INDEXER),
        # Blackwell: auto → fp8_e4m3 with the trtllm backend, which keeps the plain 576-value layout
        ("b200", (), "0.5.18", LATENT + INDEXER),
        # FP8 asked on Hopper: flashmla_kv's scaled layout, 656 B
        ("h200", ("--kv-cache-dtype", "fp8_e4m3"), "0.5.18", FP8_DS_MLA + INDEXER),
        # 0.5.9's cell counts the FP8 latent as 576 B (the pool allocates 656 B)
        ("h200", ("--kv-cache-dtype", "fp8_e4m3"), "0.5.9", LATENT + INDEXER),
    ],
)
def test_sglang_dsa_cell(
    capsys: pytest.CaptureFixture[str], gpu: str, extra: tuple[str, ...], version: str, per_layer: int
) -> None:
    out = _plan(capsys, "--gpu", gpu, "-tp", "8", "--engine", "sglang", "--engine-version", version, *extra)
    sg = out["sglang"]
    assert sg["bytes_per_token"] == out["kv_bytes_per_token"] == LAYERS * per_layer
    assert sg["page_size"] == 64  # SGLang sets page size 64 for DSA
    assert sg["max_total_num_tokens"] % 64 == 0
    assert sg["kv_cache_bytes"] == sg["max_total_num_tokens"] * sg["bytes_per_token"]
    assert sum(term["bytes"] for term in sg["terms"].values()) == sg["capacity_bytes"]


def test_sglang_beside_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    """`--engine both` on a B200: vLLM keeps bf16 (auto) while SGLang defaults DSA to FP8 there."""
    out = _plan(capsys, "--gpu", "b200", "-tp", "8", "--engine", "both")
    assert out["kv_bytes_per_token"] == LAYERS * (LATENT * 2 + INDEXER)
    assert out["block_size"] == 64  # FLASHMLA_SPARSE's kernel blocks (multiples of 64), not CUTLASS MLA's 128
    assert out["sglang"]["bytes_per_token"] == LAYERS * (LATENT + INDEXER)
    assert any("fp8_e4m3 (SGLang's default for auto)" in line for line in out["sglang"]["branch"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--kv-cache-dtype", "fp8_e5m2"), "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3"),
        (("--engine-version", "0.5.2"), "before 0.5.9"),
    ],
)
def test_sglang_refuses_in_one_line(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], says: str
) -> None:
    code = main(
        ["plan", "--model", "deepseek-v3.2", "--gpu", "h200", "-tp", "8", "--engine", "sglang", *args]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err
