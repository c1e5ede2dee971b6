"""ModelOpt MIXED_PRECISION checkpoints (`quant_algo: MIXED_PRECISION` + a per-module `quantized_layers` map): weights
sized module by module, the vLLM releases that load each algo, the KV cache dtype the checkpoint declares, and
one-line refusals.

The fixtures are synthesised here (the Qwen3.5 shapes of tests/registry/test_registry_qwen3_5.py, a small Llama and
a small Qwen3-MoE): FP8 attention / Gated DeltaNet projections and NVFP4 MLPs, the layout ModelOpt's mixed recipes
write. The expected bytes come from an independent walk over the checkpoint's tensor names (`tensors`), not from
vramctl's layout formula.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.registry.test_registry_qwen3_5 import dense_wrapper, moe_wrapper, tensors
from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.registry.models import spec_from_config

PREFIX = "model.language_model.layers"


def _fp8(n: int) -> int:
    """A FP8 per-tensor weight: a byte per value + float32 weight_scale and input_scale."""
    return n + 8


def _nvfp4(n: int, group: int = 16) -> int:
    """An NVFP4 weight: two values per byte + a float8 scale per 16 + float32 weight_scale_2 and input_scale."""
    return n // 2 + n // group + 8


def qwen_mixed(*, w4a16: bool = True, lm_head: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json, hf_quant_config.json) of a Qwen3.5-27B-shaped MIXED_PRECISION checkpoint."""
    cfg = dense_wrapper()
    t = cfg["text_config"]
    nvfp4 = {"quant_algo": "W4A16_NVFP4" if w4a16 else "NVFP4", "group_size": 16}
    layers: dict[str, Any] = {}
    for i in range(t["num_hidden_layers"]):
        if (i + 1) % 4 == 0:
            for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
                layers[f"{PREFIX}.{i}.self_attn.{p}"] = {"quant_algo": "FP8"}
        else:
            for p in ("in_proj_qkv", "in_proj_z", "out_proj"):
                layers[f"{PREFIX}.{i}.linear_attn.{p}"] = {"quant_algo": "FP8"}
        for p in ("gate_proj", "up_proj", "down_proj"):
            layers[f"{PREFIX}.{i}.mlp.{p}"] = dict(nvfp4)
    if lm_head:
        layers["lm_head"] = dict(nvfp4)
    quant = {
        "producer": {"name": "modelopt", "version": "0.45.0"},
        "quantization": {
            "quant_algo": "MIXED_PRECISION",
            "kv_cache_quant_algo": "FP8",
            "exclude_modules": ["mtp*"],
            "quantized_layers": layers,
        },
    }
    return cfg, quant


def expected_qwen_bytes(cfg: dict[str, Any], *, lm_head: bool = True) -> int:
    """The checkpoint's bytes from its tensor names: FP8 attention / linear-attention projections, NVFP4 MLPs (and
    lm_head), everything else (embeddings, norms, conv, in_proj_b / in_proj_a, vision tower) in bf16."""
    t = cfg["text_config"]
    parts = tensors(cfg)
    n, h = t["num_hidden_layers"], t["hidden_size"]
    n_full = n // 4
    heads, kv, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    key, value = t["linear_num_key_heads"] * t["linear_key_head_dim"], t["linear_num_value_heads"] * t["linear_value_head_dim"]
    fp8 = n_full * (_fp8(h * heads * hd * 2) + 2 * _fp8(h * kv * hd) + _fp8(heads * hd * h))
    fp8 += (n - n_full) * (_fp8(h * (2 * key + value)) + _fp8(h * value) + _fp8(value * h))
    inter = t["intermediate_size"]
    nvfp4 = n * 3 * _nvfp4(h * inter)
    quantised_keys = {
        "self_attn.q_proj", "self_attn.k_proj+v_proj", "self_attn.o_proj", "linear_attn.in_proj_qkv",
        "linear_attn.in_proj_z", "linear_attn.out_proj", "mlp.gate+up+down",
    }
    if lm_head:
        quantised_keys.add("lm_head")
        nvfp4 += _nvfp4(t["vocab_size"] * h)
    bf16 = 2 * sum(v for k, v in parts.items() if k not in quantised_keys)
    return fp8 + nvfp4 + bf16


def _folded(cfg: dict[str, Any], quant: dict[str, Any]) -> dict[str, Any]:
    """config.json with the hf_quant_config folded in, as vramctl.registry.local reads a folder."""
    return {**cfg, "quantization_config": {"quant_method": "modelopt", **quant["quantization"]}}


@pytest.mark.parametrize("lm_head", [True, False])
def test_qwen3_5_mixed_weights_match_the_tensor_walk(lm_head: bool) -> None:
    cfg, quant = qwen_mixed(lm_head=lm_head)
    spec = spec_from_config(_folded(cfg, quant), where="config.json", name="q")
    want = expected_qwen_bytes(cfg, lm_head=lm_head)
    assert spec.quantization == "modelopt_mixed"
    assert spec.quant_algos == ("FP8", "W4A16_NVFP4")  # most entries first
    assert abs(spec.weight_bytes - want) / want < 0.001
    assert spec.checkpoint_kv_cache_dtype == "fp8_e4m3"
    assert spec.mtp_unquantised  # no mtp.* key in the map: vLLM builds the MTP layers in 16 bits


def test_config_json_form_equals_the_hf_quant_config_form(tmp_path: Path) -> None:
    """The same map in config.json's quantization_config (ModelOpt ≥ 0.42 writes it there too) and in
    hf_quant_config.json beside a config.json without one give the same spec."""
    cfg, quant = qwen_mixed()
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    from vramctl.registry.local import load_local_model

    from_file = load_local_model(str(folder))
    inline = spec_from_config(_folded(cfg, quant), where="config.json", name="q")
    assert from_file.weight_bytes == inline.weight_bytes
    assert from_file.quant_algos == inline.quant_algos


def test_unmapped_modules_stay_16_bit() -> None:
    """A Linear absent from the map is unquantised (UnquantizedLinearMethod): dropping the MLP entries of half the
    layers adds back their 16-bit bytes less their NVFP4 bytes."""
    cfg, quant = qwen_mixed()
    full = spec_from_config(_folded(cfg, quant), where="config.json", name="q").weight_bytes
    sparse = copy.deepcopy(quant)
    layers = sparse["quantization"]["quantized_layers"]
    t = cfg["text_config"]
    dropped = 0
    for i in range(0, t["num_hidden_layers"], 2):
        for p in ("gate_proj", "up_proj", "down_proj"):
            del layers[f"{PREFIX}.{i}.mlp.{p}"]
            dropped += 1
    n = t["hidden_size"] * t["intermediate_size"]
    got = spec_from_config(_folded(cfg, sparse), where="config.json", name="q").weight_bytes
    assert got - full == dropped * (2 * n - _nvfp4(n))


def test_moe_experts_module_and_shared_expert() -> None:
    """The MoE layout: the whole `mlp.experts` module NVFP4 (every expert's gate / up / down), shared experts NVFP4,
    attention FP8; the router stays bf16."""
    cfg = moe_wrapper()
    t = cfg["text_config"]
    layers: dict[str, Any] = {}
    for i in range(t["num_hidden_layers"]):
        layers[f"{PREFIX}.{i}.mlp.experts"] = {"quant_algo": "NVFP4", "group_size": 16}
        for p in ("gate_proj", "up_proj", "down_proj"):
            layers[f"{PREFIX}.{i}.mlp.shared_expert.{p}"] = {"quant_algo": "NVFP4", "group_size": 16}
    quant = {"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": layers}}
    spec = spec_from_config(_folded(cfg, quant), where="config.json", name="m")
    parts = tensors(cfg)
    n, h = t["num_hidden_layers"], t["hidden_size"]
    e, m, s = t["num_experts"], t["moe_intermediate_size"], t["shared_expert_intermediate_size"]
    quantised = n * 3 * (e * _nvfp4(h * m) + _nvfp4(h * s))
    want = quantised + 2 * sum(v for k, v in parts.items() if k not in ("mlp.experts", "mlp.shared_expert"))
    assert abs(spec.weight_bytes - want) / want < 0.001
    assert spec.checkpoint_kv_cache_dtype is None  # no kv_cache_quant_algo declared


def test_llama_per_expert_free_layout_and_block_fp8() -> None:
    """A plain Llama: FP8_PB_WO attention (a float32 scale per 128 × 128 block), MXFP8 MLP (a uint8 scale per 32)."""
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
        "intermediate_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 32000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    }
    layers: dict[str, Any] = {}
    for i in range(2):
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            layers[f"model.layers.{i}.self_attn.{p}"] = {"quant_algo": "FP8_PB_WO"}
        for p in ("gate_proj", "up_proj", "down_proj"):
            layers[f"model.layers.{i}.mlp.{p}"] = {"quant_algo": "MXFP8"}
    quant = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": layers}
    spec = spec_from_config({**cfg, "quantization_config": quant}, where="config.json", name="l")
    h, kv_dim, inter = 1024, 256, 4096

    def block(r: int, c: int) -> int:
        return r * c + 4 * -(-r // 128) * -(-c // 128)

    attention = block(h, h) * 2 + block(kv_dim, h) * 2
    mlp = 3 * (h * inter + h * inter // 32)
    plain = 2 * (2 * 32000 * h + 2 * 2 * h + h)  # embeddings, lm_head, 2 norms per layer, the final norm
    assert spec.weight_bytes == 2 * (attention + mlp) + plain
    assert set(spec.quant_algos) == {"FP8_PB_WO", "MXFP8"}


@pytest.mark.parametrize(
    ("layers", "needle"),
    [
        ({}, "non-empty 'quantized_layers'"),
        ({"model.language_model.layers.0.mlp.gate_proj": {"quant_algo": "INT3_MAGIC"}}, "INT3_MAGIC"),
        ({"model.language_model.layers.0.mlp.gate_proj": "FP8"}, "'quant_algo' string"),
        ({"model.visual.blocks.0.attn.qkv": {"quant_algo": "FP8"}}, "model.visual.blocks.0.attn.qkv"),
        ({"model.language_model.layers.0.mlp.gate_proj": {"quant_algo": "NVFP4", "group_size": 0}}, "group_size"),
    ],
)
def test_bad_maps_are_one_line(layers: dict[str, Any], needle: str) -> None:
    cfg, quant = qwen_mixed()
    quant["quantization"]["quantized_layers"] = layers
    with pytest.raises(BadInputError) as err:
        spec_from_config(_folded(cfg, quant), where="config.json", name="q")
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def _folder(tmp_path: Path, cfg: dict[str, Any], quant: dict[str, Any]) -> str:
    folder = tmp_path / "mixed"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    return str(folder)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any] | None, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip().startswith("{") else None), err


def test_plan_json_takes_the_checkpoint_kv_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--kv-cache-dtype auto` resolves to the checkpoint's FP8 from vLLM 0.14: half the KV bytes per token of the
    same plan with an explicit bfloat16 cache; weights as the registry sized them."""
    cfg, quant = qwen_mixed()
    folder = _folder(tmp_path, cfg, quant)
    base = ("--model", folder, "--gpu", "h100", "--max-model-len", "32768", "--max-num-seqs", "256", "--engine-version", "0.32.0", "--json")
    code, auto, _ = _plan(capsys, *base)
    assert code == 0 and auto is not None
    assert auto["settings"]["kv_cache_dtype"] == "fp8_e4m3"
    assert any("kv-cache-dtype auto → fp8_e4m3" in line for line in auto["explanations"])
    code, bf16, _ = _plan(capsys, *base, "--kv-cache-dtype", "bfloat16")
    assert code == 0 and bf16 is not None
    assert bf16["kv_bytes_per_token"] > auto["kv_bytes_per_token"]
    weights = auto["terms"]["weights"]  # + the rotary cos/sin cache (32 MiB here)
    want = expected_qwen_bytes(cfg)
    assert abs(weights["bytes"] - want) / want < 0.01


def test_plan_before_0_14_keeps_the_model_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, quant = qwen_mixed(w4a16=False)
    quant["quantization"]["quantized_layers"].pop("lm_head")
    folder = _folder(tmp_path, cfg, quant)
    # MIXED_PRECISION needs 0.17, so 0.14's rule is seen through an FP8-only map on 0.17 vs the flag
    code, plan, err = _plan(capsys, "--model", folder, "--gpu", "h100", "--max-model-len", "32768", "--max-num-seqs", "256", "--engine-version", "0.17.0", "--json")
    assert code == 0 and plan is not None, err
    assert plan["settings"]["kv_cache_dtype"] == "fp8_e4m3"


@pytest.mark.parametrize(
    ("version", "w4a16", "needle"),
    [("0.16.0", False, "from 0.17.0"), ("0.21.0", True, "W4A16_NVFP4 layers, which vLLM loads from 0.22.0")],
)
def test_releases_that_cannot_load_the_map_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, w4a16: bool, needle: str
) -> None:
    cfg, quant = qwen_mixed(w4a16=w4a16)
    folder = _folder(tmp_path, cfg, quant)
    code, _, err = _plan(capsys, "--model", folder, "--gpu", "h100", "--engine-version", version)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_quantization_flag_modelopt_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg, quant = qwen_mixed()
    folder = _folder(tmp_path, cfg, quant)
    code, _, err = _plan(capsys, "--model", folder, "--gpu", "h100", "--max-model-len", "32768", "--max-num-seqs", "256", "--quantization", "modelopt", "--json")
    assert code == 0, err
    code, _, err = _plan(capsys, "--model", folder, "--gpu", "h100", "--quantization", "awq")
    assert code == 2 and "modelopt_mixed" in err


def test_deepseek_v4_without_compress_ratios_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DeepSeek-V4 plans from its per-layer compress_ratios (tests/registry/test_dsv4.py); a config without them is
    refused in one line naming the field, exit 2 (before the model was planned: "missing required field
    'intermediate_size'")."""
    cfg = {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": 1024,
        "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 1, "head_dim": 512,
        "q_lora_rank": 256, "o_lora_rank": 128, "o_groups": 4, "hc_mult": 4, "moe_intermediate_size": 512,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000, "sliding_window": 128,
        "index_n_heads": 8, "index_head_dim": 128, "max_position_embeddings": 65536,
    }
    folder = tmp_path / "v4"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    code = main(["plan", "--model", str(folder), "--gpu", "h200"])
    err = capsys.readouterr().err
    assert code == 2
    assert "compress_ratios" in err
    assert len(err.strip().splitlines()) == 1
    cfg["compress_ratios"] = [128, 4, 128, 0]
    (folder / "config.json").write_text(json.dumps(cfg))
    assert main(["plan", "--model", str(folder), "--gpu", "h200"]) == 0
