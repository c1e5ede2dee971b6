"""config.json shapes of real models that are not bundled: what an unseen checkpoint folder must give.

Each fixture is written here with only the fields the case needs and small numbers of our own; the expected
values are computed by hand from the engines' / transformers' module layouts (docs/accuracy.md, "Unseen
config.json files", lists the real models these shapes come from).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.core.params import linear_bytes, param_breakdown
from vramctl.core.specs import FULL_ATTENTION, SLIDING_ATTENTION, ModelSpec
from vramctl.core.weights import stage_rank_weight_bytes
from vramctl.registry import load_model
from vramctl.registry.models import spec_from_config

BASE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def spec(**changes: Any) -> ModelSpec:
    config = {**BASE, **changes}
    for key in [k for k, v in changes.items() if v is _DROP]:
        config.pop(key)
    return spec_from_config(config, where="config.json", name="unseen")


_DROP = object()


def write(tmp_path: Path, config: dict[str, Any]) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def run_plan(
    folder: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, Any], str]:
    code = main(["plan", "--model", str(folder), "--gpu", "H100", "--json", *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


# ---- context length (vLLM _get_and_verify_max_len) -------------------------------------------------


def test_model_max_length_alone_is_the_context(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Baichuan2: no max_position_embeddings, only model_max_length; it was refused before."""
    config = {**BASE, "model_type": "baichuan", "model_max_length": 640}
    config.pop("max_position_embeddings")
    code, data, err = run_plan(write(tmp_path, config), capsys)
    assert code == 0, err
    assert data["max_model_len"] == 640
    assert data["model"]["max_position_embeddings"] == 640


def test_model_max_length_wins_over_max_position_embeddings() -> None:
    """Command-R v01: max_position_embeddings 8192, model_max_length 131072 → vLLM serves 131072."""
    assert spec(model_max_length=4096).max_position_embeddings == 4096


def test_smallest_length_key_is_taken() -> None:
    assert spec(seq_length=512).max_position_embeddings == 512


def test_no_length_key_at_all_is_2048_with_a_source() -> None:
    got = spec(max_position_embeddings=_DROP)
    assert got.max_position_embeddings == 2048
    assert any("2048" in source for _, source in got.sources)


@pytest.mark.parametrize(
    ("rope", "expected"),
    [
        ({"rope_type": "dynamic", "factor": 2.0}, 2048),  # InternLM2.5: 32768 × 2 = 65536 in the real one
        ({"type": "dynamic", "factor": 6.0}, 6144),  # old "type" key (InternLM3 × 6)
        ({"type": "linear", "factor": 4}, 4096),
        ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 128}, 1024),
        ({"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}, 1024),
        ({"type": "su", "long_factor": [1.0], "short_factor": [1.0]}, 1024),
        ({"type": "mrope", "mrope_section": [2, 3, 3]}, 1024),  # Qwen2-VL: patched to "default"
        ({"rope_type": "default"}, 1024),
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}, 512),
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}, 1024),
        # Qwen3 + yarn: vLLM derives 4 × 512 = 2048, SGLang keeps 1024; the smaller is kept
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}, 1024),
        ({"rope_type": "dynamic", "factor": None}, 1024),  # a null factor is 1 (vLLM's .get default)
    ],
)
def test_rope_scaling_derives_the_context(rope: dict[str, Any], expected: int) -> None:
    assert spec(rope_scaling=rope).max_position_embeddings == expected


def test_transformers_5_rope_parameters() -> None:
    """transformers 5 renamed rope_scaling to rope_parameters (it also carries rope_theta)."""
    got = spec(rope_parameters={"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0})
    assert got.max_position_embeddings == 3072


def test_gemma3_length_is_already_scaled() -> None:
    got = spec(model_type="gemma3_text", rope_scaling={"rope_type": "linear", "factor": 8.0})
    assert got.max_position_embeddings == 1024


@pytest.mark.parametrize(
    ("rope", "needle"),
    [
        ("yarn", "'rope_scaling' must be a mapping"),
        ({"rope_type": 3}, "rope_type"),
        ({"rope_type": "dynamic", "factor": -2}, "factor"),
        ({"rope_type": "dynamic", "factor": "2"}, "factor"),
        ({"rope_type": "dynamic", "factor": 1e9}, "factor"),
        ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": "x"}, "original_max"),
    ],
)
def test_bad_rope_scaling_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rope: Any, needle: str
) -> None:
    code, _, err = run_plan(write(tmp_path, {**BASE, "rope_scaling": rope}), capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err


# ---- attention patterns -------------------------------------------------------------------------------


def test_cohere2_every_fourth_layer_is_global() -> None:
    """Command-A / Command-R7B: no layer_types in older configs; Cohere2Config's pattern default is 4."""
    got = spec(model_type="cohere2", num_hidden_layers=8, sliding_window=32)
    kinds = got.attention_kinds()
    assert [i for i, k in enumerate(kinds) if k == FULL_ATTENTION] == [3, 7]
    assert got.sliding_window == 32


def test_explicit_integer_pattern() -> None:
    got = spec(model_type="cohere2", num_hidden_layers=6, sliding_window=32, sliding_window_pattern=3)
    assert got.num_full_layers == 2


def test_exaone4_letter_pattern() -> None:
    got = spec(model_type="exaone4", num_hidden_layers=8, sliding_window=32, sliding_window_pattern="LLLG")
    assert got.attention_kinds() == (SLIDING_ATTENTION,) * 3 + (FULL_ATTENTION,) + (
        SLIDING_ATTENTION,
    ) * 3 + (FULL_ATTENTION,)


def test_bad_letter_pattern_is_refused() -> None:
    with pytest.raises(BadInputError, match="sliding_window_pattern"):
        spec(sliding_window=32, sliding_window_pattern="LXG")


def test_cohere2_kv_is_planned_per_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: every layer sliding, so the blocks per request ignored the global layers' full context."""
    config = {**BASE, "model_type": "cohere2", "num_hidden_layers": 8, "sliding_window": 32}
    code, data, err = run_plan(write(tmp_path, config), capsys, "--max-model-len", "1024")
    assert code == 0, err
    # 2 global layers (a group of 2) + 6 sliding layers (3 groups of 2): the global group alone needs 64 blocks
    assert data["blocks_per_request"] > 1024 // 16


# ---- MoE layouts ------------------------------------------------------------------------------------


def test_ernie45_moe_keys() -> None:
    """ERNIE-4.5-MoE: moe_num_experts / moe_k / moe_num_shared_experts / moe_layer_start_index."""
    got = spec(
        model_type="ernie4_5_moe",
        moe_num_experts=8,
        moe_k=2,
        moe_intermediate_size=16,
        moe_num_shared_experts=2,
        moe_layer_start_index=1,
        moe_layer_interval=1,
        moe_use_aux_free=True,
    )
    assert got.moe is not None
    assert (got.moe.num_experts, got.moe.num_experts_per_tok, got.moe.first_k_dense_replace) == (8, 2, 1)
    parts = param_breakdown(got)
    assert parts.experts == 3 * 8 * 3 * 64 * 16  # 3 MoE layers × 8 experts × gate/up/down
    assert parts.shared_experts == 3 * 3 * 64 * 32  # 2 shared experts of 16 = one MLP of 32
    assert parts.dense_mlp == 1 * 3 * 64 * 96
    assert parts.router == 3 * (8 * 64 + 8)  # gate + the per-expert correction bias


def test_llama4_shared_expert_and_dense_width() -> None:
    """Llama-4: intermediate_size is the experts' (and the shared expert's), intermediate_size_mlp the dense MLP's."""
    got = spec(
        model_type="llama4_text",
        num_local_experts=4,
        num_experts_per_tok=1,
        intermediate_size=16,
        intermediate_size_mlp=40,
        interleave_moe_layer_step=2,
    )
    assert got.moe is not None and got.intermediate_size == 40
    parts = param_breakdown(got)
    assert parts.experts == 2 * 4 * 3 * 64 * 16  # layers 1 and 3 are MoE
    assert parts.shared_experts == 2 * 3 * 64 * 16
    assert parts.dense_mlp == 2 * 3 * 64 * 40


# ---- vision towers -----------------------------------------------------------------------------------


def _linear(rows: int, cols: int, bias: bool = True) -> int:
    return rows * cols + (rows if bias else 0)


def test_qwen2_5_vl_tower_is_counted() -> None:
    vision = {"depth": 2, "hidden_size": 16, "intermediate_size": 24, "out_hidden_size": 64, "patch_size": 2}
    got = spec(model_type="qwen2_5_vl", vision_config=vision)
    block = 2 * 16 + _linear(48, 16) + _linear(16, 16) + 2 * _linear(24, 16) + _linear(16, 24)
    merger = 16 + _linear(64, 64) + _linear(64, 64)
    assert got.vision_params == 3 * 2 * 2 * 2 * 16 + 2 * block + merger


def test_qwen2_vl_tower_is_counted() -> None:
    vision = {"depth": 1, "embed_dim": 16, "mlp_ratio": 2, "hidden_size": 64, "patch_size": 2}
    got = spec(model_type="qwen2_vl", vision_config=vision)
    block = 4 * 16 + _linear(48, 16) + _linear(16, 16) + _linear(32, 16) + _linear(16, 32)
    merger = 2 * 16 + _linear(64, 64) + _linear(64, 64)
    assert got.vision_params == 3 * 2 * 2 * 2 * 16 + block + merger


def test_qwen3_vl_nested_text_config_with_dtype_key() -> None:
    """Qwen3-VL: the language model under text_config, `dtype` (transformers ≥ 4.56) instead of torch_dtype."""
    text = {k: v for k, v in BASE.items() if k not in ("architectures", "torch_dtype")}
    text.update(model_type="qwen3_vl_text", dtype="float16", head_dim=16)
    vision = {
        "depth": 1,
        "hidden_size": 8,
        "intermediate_size": 12,
        "out_hidden_size": 64,
        "patch_size": 2,
        "num_position_embeddings": 4,
        "deepstack_visual_indexes": [0],
    }
    config = {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl"}
    got = spec_from_config(
        {**config, "text_config": text, "vision_config": vision}, where="config.json", name="vl"
    )
    assert got.torch_dtype == "float16" and got.head_dim == 16 and got.hidden_size == 64
    block = 4 * 8 + _linear(24, 8) + _linear(8, 8) + _linear(12, 8) + _linear(8, 12)
    mlp = _linear(32, 32) + _linear(64, 32)
    embed = 3 * 2 * 2 * 2 * 8 + 8 + 4 * 8
    assert got.vision_params == embed + block + (2 * 8 + mlp) + (2 * 32 + mlp)


def test_llama4_tower_is_counted() -> None:
    vision = {
        "model_type": "llama4_vision_model",
        "hidden_size": 8,
        "num_hidden_layers": 1,
        "intermediate_size": 32,
        "image_size": 8,
        "patch_size": 4,
        "projector_input_dim": 16,
        "projector_output_dim": 16,
        "vision_output_dim": 16,
    }
    got = spec(model_type="llama4", vision_config=vision)
    block = 4 * _linear(8, 8) + 4 * 8 + _linear(32, 8) + _linear(8, 32)
    embed = 3 * 4 * 4 * 8 + 8 + 5 * 8 + 4 * 8
    assert got.vision_params == embed + block + 32 * 16 + 16 * 16 + 16 * 64


def test_pixtral_tower_is_counted() -> None:
    vision = {"model_type": "pixtral", "hidden_size": 8, "num_hidden_layers": 1, "intermediate_size": 16}
    vision.update(num_attention_heads=2, head_dim=4, patch_size=2)
    got = spec(model_type="mistral3", vision_config=vision)
    block = 2 * 8 + 4 * 8 * 8 + 3 * 8 * 16
    projector = 8 + 32 * 8 + 8 * 64 + 64 * 64
    assert got.vision_params == 3 * 2 * 2 * 8 + 8 + block + projector


# ---- quantisation ------------------------------------------------------------------------------------


def test_modelopt_fp8_is_one_byte_per_weight() -> None:
    got = spec(
        quantization_config={"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}
    )
    assert (got.quantization, got.quant_bits) == ("modelopt", 8)
    assert linear_bytes(got, 64, 64) == 64 * 64 + 4 * 64


def test_modelopt_nvfp4_is_four_and_a_half_bits() -> None:
    got = spec(quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16})
    assert (got.quantization, got.quant_bits, got.quant_group_size) == ("modelopt_fp4", 4, 16)
    assert linear_bytes(got, 64, 64) == 64 * 64 // 2 + 64 * 64 // 16 + 4


def test_compressed_tensors_nvfp4() -> None:
    weights = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
    quant = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": weights}}}
    got = spec(quantization_config=quant)
    assert linear_bytes(got, 64, 64) == 64 * 64 // 2 + 64 * 64 // 16 + 4


def test_gptq_int8_keeps_group_scales_and_zeros() -> None:
    got = spec(quantization_config={"quant_method": "gptq", "bits": 8, "group_size": 32, "desc_act": False})
    groups = 64 // 32
    assert linear_bytes(got, 64, 64) == 64 * 64 + 2 * groups * 64 + groups * 64 + 4 * 64


@pytest.mark.parametrize(
    ("dtype", "bits", "group"), [("fp8_e4m3", 8, None), ("fp4", 4, 32), ("int4", 4, 128)]
)
def test_quark(dtype: str, bits: int, group: int | None) -> None:
    weight: dict[str, Any] = {"dtype": dtype}
    if dtype == "int4":
        weight["group_size"] = 128
    got = spec(quantization_config={"quant_method": "quark", "global_quant_config": {"weight": weight}})
    assert (got.quantization, got.quant_bits, got.quant_group_size) == ("quark", bits, group)


@pytest.mark.parametrize(
    ("quant", "needle"),
    [
        ({"quant_method": "modelopt", "quant_algo": "INT2_MAGIC"}, "quant_algo"),
        ({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "int3"}}}, "Quark"),
        ({"quant_method": "quark"}, "Quark"),
    ],
)
def test_unknown_algorithms_are_refused(quant: dict[str, Any], needle: str) -> None:
    with pytest.raises(BadInputError, match=needle):
        spec(quantization_config=quant)


# ---- defaults of optional fields ------------------------------------------------------------------------


def test_engine_defaults_for_missing_optional_fields() -> None:
    got = spec(num_key_value_heads=_DROP, torch_dtype=_DROP, tie_word_embeddings=_DROP)
    assert got.num_key_value_heads == 8  # = num_attention_heads
    assert got.head_dim == 64 // 8  # hidden / heads
    assert got.torch_dtype == "bfloat16"
    assert not got.tie_word_embeddings


def test_head_dim_wins_over_hidden_over_heads() -> None:
    """Mistral-Small-24B: head_dim 128 with hidden 5120 / 32 heads = 160."""
    got = spec(head_dim=4)
    assert got.head_dim == 4
    assert param_breakdown(got).attention == 4 * (2 * 64 * 32 + 2 * 64 * 8)


def test_dtype_key_of_transformers_5() -> None:
    assert spec(torch_dtype=_DROP, dtype="float16").torch_dtype == "float16"


def test_gemma3_text_is_tied_by_default() -> None:
    assert spec(model_type="gemma3_text", tie_word_embeddings=_DROP).tie_word_embeddings


# ---- refusals and absurd values: one line, exit 2 ------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"num_hidden_layers": -4}, "num_hidden_layers"),
        ({"num_hidden_layers": "32"}, "num_hidden_layers"),
        ({"num_attention_heads": 2.5}, "num_attention_heads"),
        ({"hidden_size": 1e308}, "parameters"),
        ({"vocab_size": 10**16}, "parameters"),
        ({"intermediate_size": [96]}, "intermediate_size"),
        ({"max_position_embeddings": 0}, "max_position_embeddings"),
        ({"max_position_embeddings": 10**12}, "max_position_embeddings"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"torch_dtype": 16}, "torch_dtype"),
        ({"torch_dtype": "float13"}, "torch_dtype"),
        ({"text_config": "llama"}, "text_config"),
        ({"quantization_config": {"quant_method": 4}}, "quant_method"),
        ({"block_configs": [{"attention": {"n_heads_in_group": 8}}]}, "block_configs"),
    ],
)
def test_absurd_values_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], needle: str
) -> None:
    code, _, err = run_plan(write(tmp_path, {**BASE, **changes}), capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err


def test_folder_round_trip_keeps_the_sources(tmp_path: Path) -> None:
    config = {**BASE, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}
    got = load_model(str(write(tmp_path, config)))
    assert got.max_position_embeddings == 2048
    assert any("dynamic" in source for fact, source in got.sources if fact == "max_position_embeddings")


# ---- property: any value in the fields these shapes read gives a spec or one BadInputError -------------

_ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.integers(min_value=-2, max_value=4), max_size=3),
    st.dictionaries(
        st.sampled_from(["rope_type", "type", "factor", "dtype", "weight"]), st.integers(), max_size=2
    ),
)
_KEYS = [
    "rope_scaling",
    "rope_parameters",
    "model_max_length",
    "seq_length",
    "sliding_window",
    "sliding_window_pattern",
    "moe_num_experts",
    "moe_k",
    "moe_layer_start_index",
    "moe_layer_interval",
    "intermediate_size_mlp",
    "interleave_moe_layer_step",
    "vision_config",
    "block_configs",
    "dtype",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model_type=st.sampled_from(
        ["llama", "cohere2", "exaone4", "ernie4_5_moe", "llama4_text", "qwen2_5_vl", "llama4"]
    ),
    changes=st.dictionaries(st.sampled_from(_KEYS), _ODD, max_size=4),
    quant=st.one_of(
        st.none(),
        st.fixed_dictionaries(
            {"quant_method": st.sampled_from(["modelopt", "quark", "gptq", "compressed-tensors"])},
            optional={"quant_algo": _ODD, "bits": _ODD, "group_size": _ODD, "global_quant_config": _ODD},
        ),
    ),
)
def test_unseen_fields_give_a_spec_or_one_bad_input_line(
    model_type: str, changes: dict[str, Any], quant: dict[str, Any] | None
) -> None:
    config = {**BASE, "model_type": model_type, **changes}
    if quant is not None:
        config["quantization_config"] = quant
    try:
        got = spec_from_config(config, where="config.json", name="fuzz")
    except BadInputError as err:
        assert "\n" not in str(err) and "config.json" in str(err)
        return
    assert 0 < got.max_position_embeddings <= 1 << 30
    assert got.weight_bytes > 0 and got.param_count > 0
    for tp in (1, 2, 8):
        assert sum(stage_rank_weight_bytes(got, tp=tp, pp=2)) > 0
    assert len(got.attention_kinds()) == got.num_hidden_layers


def test_ignore_list_keeps_attention_in_16_bits() -> None:
    """AWQ `modules_to_not_convert: ["self_attn"]`: q, k, v, o stay bf16 (2 bytes per weight)."""
    awq = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True}
    packed = spec(quantization_config=awq)
    kept = spec(quantization_config={**awq, "modules_to_not_convert": ["self_attn", "lm_head"]})
    shapes = [(64, 64), (16, 64), (16, 64), (64, 64)]  # q, k, v (2 KV heads of 8), o
    per_layer = sum(2 * r * c - linear_bytes(packed, r, c) for r, c in shapes)
    assert kept.weight_bytes - packed.weight_bytes == 4 * per_layer


def test_kimi_style_regex_ignore_quantises_only_experts() -> None:
    mla = {
        "kv_lora_rank": 16,
        "q_lora_rank": 24,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 4,
        "v_head_dim": 8,
    }
    moe = {
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "n_shared_experts": 1,
    }
    moe["first_k_dense_replace"] = 1
    weights = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}
    quant: dict[str, Any] = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"weights": weights}},
    }
    ignore = [
        "lm_head",
        r"re:.*self_attn.*",
        r"re:.*shared_experts.*",
        r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
    ]
    plain = spec(model_type="kimi_k2", **mla, **moe)
    all_packed = spec(model_type="kimi_k2", **mla, **moe, quantization_config=quant)
    experts_only = spec(model_type="kimi_k2", **mla, **moe, quantization_config={**quant, "ignore": ignore})
    parts_plain, parts_packed = param_breakdown(plain), param_breakdown(all_packed)
    assert parts_plain.experts == parts_packed.experts
    # gate / up: 16 rows × 64 inputs (2 groups of 32 per row); down: 64 rows × 16 inputs (1 group per row);
    # 4 bits per weight + a bf16 scale per group and row
    packed_triple = 2 * (16 * 64 // 2 + 2 * 2 * 16) + (64 * 16 // 2 + 2 * 1 * 64)
    plain_triple = 3 * 2 * 16 * 64
    n_triples = 3 * 4  # 3 MoE layers × 4 experts
    assert experts_only.weight_bytes == plain.weight_bytes - n_triples * (plain_triple - packed_triple)
    assert all_packed.weight_bytes < experts_only.weight_bytes


def test_router_ignore_entry_does_not_keep_the_mlp() -> None:
    """Qwen3-MoE FP8 lists `model.layers.N.mlp.gate` (the router); neither it nor a layer's name moves a part."""
    fp8 = {"quant_method": "fp8", "weight_block_size": [32, 32]}
    base = spec(quantization_config=fp8)
    listed = spec(
        quantization_config={**fp8, "modules_to_not_convert": ["mlp.gate", "model.layers.0.mlp.gate"]}
    )
    assert listed.weight_bytes == base.weight_bytes


def test_bnb_double_quant_absmax_is_one_byte() -> None:
    """unsloth `-bnb-4bit`: nested absmax. Per layer q 64 + k 16 + v 16 + o 64 + gate/up/down 3 × 96 blocks of 64."""
    bnb = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    single = spec(quantization_config=bnb)
    nested = spec(quantization_config={**bnb, "bnb_4bit_use_double_quant": True})
    blocks = 4 * (64 + 16 + 16 + 64 + 3 * 96)
    assert single.weight_bytes - nested.weight_bytes == 4 * blocks - (blocks + 8 * -(-blocks // 256))


# ---- a wrapper's text_config omits the fields equal to its class defaults ------------------------------


def test_llava_text_config_without_hidden_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """LLaVA-1.5 saves only what differs from LlamaConfig(): no hidden_size, heads, layers or MLP width."""
    text = {
        "model_type": "llama",
        "max_position_embeddings": 4096,
        "vocab_size": 32064,
        "torch_dtype": "float16",
    }
    vision = {"model_type": "clip_vision_model", "hidden_size": 16, "intermediate_size": 32}
    vision.update(num_hidden_layers=1, patch_size=14, image_size=28)
    config: dict[str, Any] = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava"}
    config["text_config"] = text
    config.update(vision_config=vision, tie_word_embeddings=False, torch_dtype="float16")
    got = load_model(str(write(tmp_path, config)))
    assert (got.hidden_size, got.intermediate_size, got.num_hidden_layers) == (4096, 11008, 32)
    assert (got.num_attention_heads, got.num_key_value_heads, got.head_dim) == (32, 32, 128)
    assert got.vocab_size == 32064 and got.max_position_embeddings == 4096
    assert any(fact == "text_config" and "hidden_size=4096" in source for fact, source in got.sources)
    code, data, err = run_plan(write(tmp_path, config), capsys)
    assert code == 0, err
    assert data["kv_bytes_per_token"] == 32 * 32 * 128 * 2 * 2


def test_gemma3_text_config_without_heads() -> None:
    """Gemma-3-4B's text_config lists hidden, MLP, layers and the window; heads, KV heads, head_dim and vocab are
    Gemma3TextConfig defaults (8, 4, 256, 262208), and the text class ties the embeddings."""
    text: dict[str, Any] = {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96}
    text.update(num_hidden_layers=12, sliding_window=32)
    got = spec_from_config(
        {"model_type": "gemma3", "text_config": text, "torch_dtype": "bfloat16"},
        where="config.json",
        name="g",
    )
    assert (got.num_attention_heads, got.num_key_value_heads, got.head_dim) == (8, 4, 256)
    assert got.vocab_size == 262208 and got.tie_word_embeddings
    assert got.num_full_layers == 2 and got.sliding_window == 32


def test_wrapper_tie_value_wins_over_the_text_class_default() -> None:
    text = {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 6}
    config = {"model_type": "gemma3", "text_config": text, "tie_word_embeddings": False}
    assert not spec_from_config(config, where="config.json", name="g").tie_word_embeddings


def test_mistral3_text_config_without_model_type_is_mistral() -> None:
    """Mistral3Config assumes model_type mistral; MistralConfig's default window is 4096 unless set to null."""
    text: dict[str, Any] = {
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "head_dim": 16,
        "vocab_size": 100,
    }
    got = spec_from_config({"model_type": "mistral3", "text_config": text}, where="config.json", name="m")
    assert (got.num_attention_heads, got.num_key_value_heads, got.head_dim) == (32, 8, 16)
    assert got.sliding_window == 4096
    text["sliding_window"] = None
    got = spec_from_config({"model_type": "mistral3", "text_config": text}, where="config.json", name="m")
    assert got.sliding_window is None


def test_chatglm_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """chatglm3-6b / glm-4-9b-chat: num_layers, ffn_hidden_size, kv_channels, padded_vocab_size, seq_length and
    multi_query_group_num KV heads; q/k/v biases only."""
    config: dict[str, Any] = {"architectures": ["ChatGLMModel"], "model_type": "chatglm", "hidden_size": 64}
    config.update(num_layers=2, ffn_hidden_size=96, kv_channels=8, padded_vocab_size=128, seq_length=512)
    config.update(num_attention_heads=8, multi_query_attention=True, multi_query_group_num=2)
    config.update(add_qkv_bias=True, add_bias_linear=False, torch_dtype="bfloat16", tie_word_embeddings=False)
    got = load_model(str(write(tmp_path, config)))
    assert (got.num_hidden_layers, got.num_key_value_heads, got.head_dim) == (2, 2, 8)
    assert (got.vocab_size, got.max_position_embeddings, got.intermediate_size) == (128, 512, 96)
    per_layer = 64 * 64 + 2 * 64 * 16 + (64 + 2 * 16) + 64 * 64 + 3 * 64 * 96 + 2 * 64
    assert got.param_count == 2 * 128 * 64 + 2 * per_layer + 64
    code, data, err = run_plan(write(tmp_path, config), capsys)
    assert code == 0, err
    assert data["kv_bytes_per_token"] == 2 * 2 * 8 * 2 * 2


def test_per_layer_ignore_entries_keep_the_layers_they_name() -> None:
    """fbgemm FP8 (Llama-4 Maverick) lists every layer's attention projections by name."""
    fp8 = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}
    every = [f"language_model.model.layers.{i}.self_attn.{p}_proj" for i in range(4) for p in "qkvo"]
    half = [name for name in every if ".layers.0." in name or ".layers.1." in name]
    base = spec(quantization_config=fp8)
    agnostic = spec(quantization_config={**fp8, "modules_to_not_convert": ["self_attn"]})
    listed = spec(quantization_config={**fp8, "modules_to_not_convert": every})
    halved = spec(
        quantization_config={**fp8, "modules_to_not_convert": [*half, "model.layers.9.self_attn.q_proj"]}
    )
    assert listed.weight_bytes == agnostic.weight_bytes > base.weight_bytes
    assert halved.weight_bytes - base.weight_bytes == (listed.weight_bytes - base.weight_bytes) // 2
