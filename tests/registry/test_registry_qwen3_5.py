"""Qwen3.5 / Qwen3.6 (`qwen3_5`, `qwen3_5_moe`) planned from config.json: the VL wrapper's `text_config`, the
Gated DeltaNet + gated-attention layout shared with Qwen3-Next, the vision tower, `mamba_ssm_dtype`, refusals.

The fixtures are written here with the fields and shapes of the Qwen3.5 config classes (transformers
configuration_qwen3_5.py / configuration_qwen3_5_moe.py): a 64-layer dense model (hidden 5120, 24 q / 4 kv heads of
256, 16 key / 48 value linear heads of 128) and a 40-layer MoE (hidden 2048, 256 experts of 512, top 8, one shared
expert of 512). Parameter counts are checked against an independent walk over the checkpoint's tensor names.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.core.kv import state_shapes
from vramctl.registry import load_model
from vramctl.registry.models import spec_from_config

VISION: dict[str, Any] = {
    "model_type": "qwen3_5",
    "depth": 27,
    "hidden_size": 1152,
    "hidden_act": "gelu_pytorch_tanh",
    "intermediate_size": 4304,
    "num_heads": 16,
    "in_channels": 3,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": 5120,
    "num_position_embeddings": 2304,
}
LINEAR = {
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
}
DENSE_TEXT: dict[str, Any] = {
    "model_type": "qwen3_5_text",
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "num_hidden_layers": 64,
    "num_attention_heads": 24,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "vocab_size": 248320,
    "max_position_embeddings": 262144,
    **LINEAR,
    "linear_num_value_heads": 48,
    "full_attention_interval": 4,
    "layer_types": [("full_attention" if (i + 1) % 4 == 0 else "linear_attention") for i in range(64)],
    "mamba_ssm_dtype": "float32",
    "dtype": "bfloat16",
    "tie_word_embeddings": False,
    "mtp_num_hidden_layers": 1,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    },
}
MOE_TEXT: dict[str, Any] = {
    "model_type": "qwen3_5_moe_text",
    "hidden_size": 2048,
    "num_hidden_layers": 40,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "vocab_size": 248320,
    "max_position_embeddings": 262144,
    **LINEAR,
    "linear_num_value_heads": 32,
    "full_attention_interval": 4,
    "num_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "mamba_ssm_dtype": "float32",
    "dtype": "bfloat16",
}


def dense_wrapper() -> dict[str, Any]:
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": copy.deepcopy(DENSE_TEXT),
        "vision_config": dict(VISION),
        "tie_word_embeddings": False,
    }


def moe_wrapper() -> dict[str, Any]:
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": copy.deepcopy(MOE_TEXT),
        "vision_config": {**VISION, "model_type": "qwen3_5_moe", "out_hidden_size": 2048},
        "tie_word_embeddings": False,
    }


def text_only(text: dict[str, Any], architecture: str) -> dict[str, Any]:
    return {**copy.deepcopy(text), "architectures": [architecture]}


# --- an independent count: the checkpoint's tensors by name -----------------------------------------------------


def tensors(cfg: dict[str, Any]) -> dict[str, int]:
    """Elements per tensor name pattern of a Qwen3.5 checkpoint (transformers modeling_qwen3_5*.py names; the
    `mtp.*` tensors are left out, as vLLM's loader skips them)."""
    t = cfg.get("text_config", cfg)
    h, heads, kv, hd = t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    kh, vh = t["linear_num_key_heads"], t["linear_num_value_heads"]
    kd, vd, kern = t["linear_key_head_dim"], t["linear_value_head_dim"], t["linear_conv_kernel_dim"]
    n = t["num_hidden_layers"]
    n_full = n // 4
    n_linear = n - n_full
    out: dict[str, int] = {}
    out["self_attn.q_proj"] = n_full * h * heads * hd * 2  # query + output gate
    out["self_attn.k_proj+v_proj"] = n_full * 2 * h * kv * hd
    out["self_attn.o_proj"] = n_full * heads * hd * h
    out["self_attn.q_norm+k_norm"] = n_full * 2 * hd
    key, value = kh * kd, vh * vd
    out["linear_attn.in_proj_qkv"] = n_linear * h * (2 * key + value)
    out["linear_attn.in_proj_z"] = n_linear * h * value
    out["linear_attn.in_proj_b+in_proj_a"] = n_linear * 2 * h * vh
    out["linear_attn.conv1d"] = n_linear * (2 * key + value) * kern
    out["linear_attn.dt_bias+A_log"] = n_linear * 2 * vh
    out["linear_attn.norm"] = n_linear * vd
    out["linear_attn.out_proj"] = n_linear * value * h
    if "num_experts" in t:
        e, m, s = t["num_experts"], t["moe_intermediate_size"], t["shared_expert_intermediate_size"]
        out["mlp.experts"] = n * e * 3 * h * m
        out["mlp.gate"] = n * e * h
        out["mlp.shared_expert"] = n * 3 * h * s
        out["mlp.shared_expert_gate"] = n * h
    else:
        out["mlp.gate+up+down"] = n * 3 * h * t["intermediate_size"]
    out["input_layernorm+post_attention_layernorm"] = n * 2 * h
    out["norm"] = h
    out["embed_tokens"] = t["vocab_size"] * h
    out["lm_head"] = t["vocab_size"] * h
    if "vision_config" in cfg:
        out["visual"] = vision_tensors(cfg["vision_config"])
    return out


def vision_tensors(v: dict[str, Any]) -> int:
    """vLLM Qwen3_VisionTransformer (qwen3_vl.py), no DeepStack mergers: Conv3d patch embed with bias, position
    table, per block norm1 / norm2 (LayerNorm w + b), qkv + proj (biased), fc1 / fc2 (biased); merger LayerNorm on
    hidden, fc1 on 4 × hidden, fc2 to out_hidden_size."""
    d, inter, out = v["hidden_size"], v["intermediate_size"], v["out_hidden_size"]
    patch = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2 * d + d
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (inter * d + inter) + (d * inter + d)
    wide = 4 * d
    merger = 2 * d + (wide * wide + wide) + (out * wide + out)
    return patch + v["num_position_embeddings"] * d + v["depth"] * block + merger


# --- the spec ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cfg", "low", "high"),
    [
        (dense_wrapper(), 26.5e9, 28.5e9),  # Qwen3.5-27B
        (moe_wrapper(), 34.5e9, 36.0e9),  # Qwen3.5-35B-A3B
        (text_only(DENSE_TEXT, "Qwen3_5ForCausalLM"), 26.0e9, 28.0e9),
        (text_only(MOE_TEXT, "Qwen3_5MoeForCausalLM"), 34.0e9, 35.5e9),
    ],
)
def test_parameters_match_the_tensors(cfg: dict[str, Any], low: float, high: float) -> None:
    spec = spec_from_config(cfg, where="config.json", name="q")
    expected = sum(tensors(cfg).values())
    assert spec.param_count == expected
    assert low < spec.param_count < high
    assert spec.weight_bytes == 2 * expected  # every tensor in bf16
    assert spec.vision_params == (vision_tensors(cfg["vision_config"]) if "vision_config" in cfg else 0)


def test_layer_split_and_state_shape_from_the_wrapper() -> None:
    spec = spec_from_config(dense_wrapper(), where="config.json", name="q")
    assert spec.layer_types.count("full_attention") == 16
    assert spec.layer_types.count("linear_attention") == 48
    assert [i for i, k in enumerate(spec.layer_types) if k == "full_attention"][:2] == [3, 7]
    st = spec.state_space
    assert st is not None and st.kind == "gated_delta_net" and st.ssm_dtype == "float32"
    # conv over 2 × 16 × 128 + 48 × 128 = 10,240 channels, kernel − 1 = 3; state (48, 128, 128)
    bf16 = state_shapes(spec, mamba_ssm_cache_dtype="float32")
    assert (bf16.conv, bf16.ssm) == ((10_240, 3), (48, 128, 128))
    assert bf16.page_bytes == 10_240 * 3 * 2 + 48 * 128 * 128 * 4
    tp2 = state_shapes(spec, tp=2)
    assert (tp2.conv, tp2.ssm) == ((5_120, 3), (24, 128, 128))
    # Qwen3.5 keeps partial_rotary_factor 0.25 in rope_parameters: rotary dim 64 of head_dim 256
    assert spec.rope_cache_elements == 262_144 * 64
    assert spec.architecture == "Qwen3_5ForConditionalGeneration"


def test_attn_output_gate_off_halves_q_proj() -> None:
    # vLLM Qwen3NextAttention: qkv_proj of total_num_heads × (1 + attn_output_gate) query heads
    cfg = dense_wrapper()
    cfg["text_config"]["attn_output_gate"] = False
    gated = spec_from_config(dense_wrapper(), where="config.json", name="q").param_count
    plain = spec_from_config(cfg, where="config.json", name="q").param_count
    assert gated - plain == 16 * 5120 * 24 * 256


@pytest.mark.parametrize(("method", "bits"), [("fp8", 8), ("nvfp4", 4)])
def test_pre_quantised_weights_scale_the_state_layers_too(method: str, bits: int) -> None:
    cfg = dense_wrapper()
    cfg["quantization_config"] = (
        {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
        if method == "fp8"
        else {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    )
    spec = spec_from_config(cfg, where="config.json", name="q")
    parts = tensors(dense_wrapper())
    linear = sum(v for k, v in parts.items() if "proj" in k or k.startswith("mlp."))
    # decoder Linear weights at `bits` (+ NVFP4's one FP8 scale per 16 weights), everything else (embeddings,
    # lm_head, norms, conv, vision) in bf16; FP8's float32 scale per 128 x 128 block is negligible
    scale = linear // 16 if method == "nvfp4" else 0
    floor = linear * bits // 8 + scale + (sum(parts.values()) - linear) * 2
    assert floor < spec.weight_bytes < floor * 1.05


def test_layer_scale_adds_two_vectors_per_layer() -> None:
    cfg = dense_wrapper()
    cfg["text_config"]["layer_scale"] = True
    base = spec_from_config(dense_wrapper(), where="config.json", name="q").param_count
    assert spec_from_config(cfg, where="config.json", name="q").param_count - base == 64 * 2 * 5120


def test_moe_fields() -> None:
    spec = spec_from_config(moe_wrapper(), where="config.json", name="q")
    moe = spec.moe
    assert moe is not None
    assert (moe.num_experts, moe.num_experts_per_tok, moe.moe_intermediate_size) == (256, 8, 512)
    assert (moe.shared_expert_intermediate_size, moe.shared_expert_gate) == (512, True)
    assert spec.layer_types.count("full_attention") == 10


def test_text_config_omitting_class_defaults() -> None:
    # to_diff_dict drops fields equal to the class defaults; loading fills them back (Qwen3_5TextConfig defaults)
    cfg = dense_wrapper()
    for key in (
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
        "head_dim",
        "layer_types",
    ):
        del cfg["text_config"][key]
    spec = spec_from_config(cfg, where="config.json", name="q")
    full = spec_from_config(dense_wrapper(), where="config.json", name="q")
    assert spec.param_count == full.param_count and spec.layer_types == full.layer_types
    assert any(key == "text_config" and "linear_key_head_dim=128" in note for key, note in spec.sources)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"layer_types": ["linear_attention"] * 3}, "'layer_types' must list 64"),
        ({"layer_types": ["linear_attention"] * 63 + ["sliding_attention"]}, "'layer_types' must list 64"),
        ({"linear_num_value_heads": "many"}, "linear_num_value_heads"),
        ({"linear_key_head_dim": -1}, "linear_key_head_dim"),
    ],
)
def test_bad_fields_are_one_clear_error(change: dict[str, Any], needle: str) -> None:
    cfg = dense_wrapper()
    cfg["text_config"].update(change)
    with pytest.raises(BadInputError, match=needle):
        spec_from_config(cfg, where="config.json", name="q")


# --- the plan, end to end ---------------------------------------------------------------------------------------


def _write(tmp_path: Path, cfg: dict[str, Any]) -> str:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


def _plan(capsys: pytest.CaptureFixture[str], folder: str, *args: str) -> dict[str, Any]:
    code = main(["plan", "--model", folder, "--gpu", "H200", *args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data: dict[str, Any] = json.loads(captured.out)
    return data


def _state_page(value_heads: int, ssm_bytes: int) -> int:
    conv = (2 * 16 * 128 + value_heads * 128) * 3 * 2
    return conv + value_heads * 128 * 128 * ssm_bytes


def test_plan_dense_wrapper_honours_mamba_ssm_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _plan(capsys, _write(tmp_path, dense_wrapper()), "--max-model-len", "32768")
    assert d["kv_bytes_per_token"] == 16 * 4 * 256 * 2 * 2  # 16 full-attention layers, K + V in bf16
    h = d["hybrid"]
    assert (h["state_layers"], h["full_attention_layers"]) == (48, 16)
    assert (h["conv_state_dtype_bytes"], h["ssm_state_dtype_bytes"]) == (2, 4)
    assert h["state_page_bytes"] == _state_page(48, 4)
    # prefix caching 'align' keeps two state blocks per group and request (vramctl/core/mamba_cache.py)
    assert h["state_bytes_per_request"] == 48 * _state_page(48, 4) * 2
    assert d["model"]["param_count"] == sum(tensors(dense_wrapper()).values())


def test_flag_and_text_only_checkpoints_before_0_32_keep_the_model_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _write(tmp_path, dense_wrapper())
    d = _plan(capsys, folder, "--mamba-ssm-cache-dtype", "bfloat16")
    assert d["hybrid"]["state_page_bytes"] == _state_page(48, 2)
    # before 0.32 vramctl keeps `auto` (the model dtype) for a text-only checkpoint's mamba_ssm_dtype
    other = tmp_path / "text"
    other.mkdir()
    folder_text = _write(other, text_only(DENSE_TEXT, "Qwen3_5ForCausalLM"))
    d = _plan(capsys, folder_text, "--engine-version", "0.31.0")
    assert d["hybrid"]["ssm_state_dtype_bytes"] == 2
    no_field = tmp_path / "nofield"
    no_field.mkdir()
    cfg = dense_wrapper()
    del cfg["text_config"]["mamba_ssm_dtype"]
    d = _plan(capsys, _write(no_field, cfg))
    assert d["hybrid"]["ssm_state_dtype_bytes"] == 2


@pytest.mark.parametrize("architecture", ["Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"])
def test_text_only_checkpoints_take_mamba_ssm_dtype_from_0_32(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], architecture: str
) -> None:
    # vLLM 0.32.0 maps both text-only classes to Qwen3_5ForCausalLMConfig, whose hook applies the config's
    # mamba_ssm_dtype to `--mamba-ssm-cache-dtype auto` (vllm/model_executor/models/config.py:880-887,1104-1106)
    text = MOE_TEXT if "Moe" in architecture else DENSE_TEXT
    folder = _write(tmp_path, text_only(text, architecture))
    assert text["mamba_ssm_dtype"] == "float32"
    layers = text["num_hidden_layers"]
    for version, ssm_bytes in (("0.31.0", 2), ("0.32.0", 4), ("0.33.0", 4)):
        d = _plan(capsys, folder, "--engine-version", version)
        h = d["hybrid"]
        assert h["ssm_state_dtype_bytes"] == ssm_bytes, version
        assert h["conv_state_dtype_bytes"] == 2, version
        assert h["state_layers"] == layers - layers // 4
    # an explicit flag still wins
    d = _plan(capsys, folder, "--engine-version", "0.32.0", "--mamba-ssm-cache-dtype", "bfloat16")
    assert d["hybrid"]["ssm_state_dtype_bytes"] == 2


def test_plan_moe_wrapper_at_tp_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _plan(capsys, _write(tmp_path, moe_wrapper()), "-tp", "2")
    assert d["kv_bytes_per_token"] == 10 * 1 * 256 * 2 * 2  # 2 KV heads over 2 ranks
    h = d["hybrid"]
    assert (h["state_layers"], h["full_attention_layers"]) == (30, 10)
    conv = (2 * 16 * 128 + 32 * 128) // 2 * 3 * 2
    assert h["state_page_bytes"] == conv + 16 * 128 * 128 * 4


def test_models_show_names_the_vision_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["models", _write(tmp_path, moe_wrapper()), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert str(vision_tensors(moe_wrapper()["vision_config"])) in out.replace(",", "")


@pytest.mark.parametrize(
    ("args", "change", "needle"),
    [
        (["--engine-version", "0.16.0"], {}, "serves from 0.17.0"),
        ([], {"linear_num_key_heads": None}, "linear_num_key_heads"),
        ([], {"layer_types": ["full_attention"] * 2}, "layer_types"),
    ],
)
def test_refusals_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], change: dict[str, Any], needle: str
) -> None:
    cfg = text_only(DENSE_TEXT, "Qwen3_5ForCausalLM")
    for key, value in change.items():
        if value is None:
            del cfg[key]
        else:
            cfg[key] = value
    code = main(["plan", "--model", _write(tmp_path, cfg), "--gpu", "H200", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and needle in err, err


def test_bundled_qwen3_6_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "qwen3.6-35b-a3b", "--gpu", "H100", "-tp", "2", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    d = json.loads(captured.out)
    # the profile's config has the MoE fixture's text shapes: the same count, by the independent walk
    assert d["model"]["param_count"] == sum(tensors(moe_wrapper()).values())
    assert d["hybrid"]["ssm_state_dtype_bytes"] == 4 and d["hybrid"]["state_layers"] == 30


def test_safetensors_leave_out_the_mtp_head(tmp_path: Path) -> None:
    # vLLM qwen3_5.py loads with skip_prefixes=["mtp."]: those tensors are not weights a serve holds. A small
    # text-only config (hidden 64, 4 layers) keeps the zero-filled file small.
    from tests.registry.test_registry_local import write_safetensors

    small = {**text_only(DENSE_TEXT, "Qwen3_5ForCausalLM"), "num_hidden_layers": 4, "hidden_size": 64}
    small.update(vocab_size=1000, intermediate_size=128, layer_types=small["layer_types"][:4])
    (tmp_path / "config.json").write_text(json.dumps(small))
    served = {
        "model.embed_tokens.weight": ("BF16", [1000, 64]),
        "model.layers.3.mlp.up_proj.weight": ("BF16", [128, 64]),
        "lm_head.weight": ("BF16", [1000, 64]),
    }
    mtp = {"mtp.fc.weight": ("BF16", [64, 128]), "mtp.layers.0.mlp.up_proj.weight": ("BF16", [128, 64])}
    write_safetensors(tmp_path / "model.safetensors", {**served, **mtp})
    spec = load_model(str(tmp_path))
    assert spec.weight_bytes == 2 * (2 * 1000 * 64 + 128 * 64)
    assert spec.param_count == 2 * 1000 * 64 + 128 * 64
