"""Gemma-4 (`gemma4` / `gemma4_text`, Gemma-4-unified) is planned layer by layer as vLLM 0.32.0 builds it;
DiffusionGemma, quantised checkpoints and pipeline parallelism stay refused in one line.

vLLM 0.32.0 builds Gemma-4 layer by layer (vllm/model_executor/models/gemma4.py): each layer's head size and KV heads
come from `per_layer_config[layer]` (:578-580; transformers 5.19 Gemma4TextConfig writes it from `global_head_dim`
and `num_global_key_value_heads` for the full-attention layers), the last `num_kv_shared_layers` layers build only a
q_proj and read an earlier layer's KV (:403-412, :471-491), `use_double_wide_mlp` doubles their MLP (:595-606), a
MoE block runs beside the dense MLP whenever `num_experts` is set (:630-665) and per-layer input embeddings of
vocab_size_per_layer_input × (hidden_size_per_layer_input × layers) are loaded (:1019-1040). vramctl.core.gemma4 and
vramctl.core.gemma4_cache model each; tests/fixtures/gemma4/kv_audit.json is what vLLM 0.32.0's own grouping code
returned for these specs (scripts/gemma4_kv_audit.py).

The configs below are synthesised from the fields vLLM reads. Where public repositories quote a published
checkpoint's fields, those are used (E2B: hidden 1536, 35 layers, 8 heads, 1 KV head, 20 KV-shared layers, per-layer
inputs of 256, double-wide MLP; 31B: hidden 5376, 32 heads, 16 sliding / 4 global KV heads, K = V on global layers,
intermediate 21504; 26B-A4B: 128 experts of 704, top 8, beside a dense MLP of 2112); the rest (the 31B's layer count,
the 26B's hidden size and heads) is made up. Their transformers 5.19 meta-device counts are in `TRANSFORMERS`.
No network.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.core.gemma4 import attention_elements, parameter_count, parameter_terms
from vramctl.core.gemma4_cache import gemma4_cache
from vramctl.registry.models import spec_from_config


def _layer_types(layers: int, every: int) -> list[str]:
    return ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]


_ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10_000.0, "rope_type": "default"},
}


def _text(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model_type": "gemma4_text",
        "vocab_size": 262_144,
        "head_dim": 256,
        "global_head_dim": 512,
        "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window": 512,
        "max_position_embeddings": 131_072,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "final_logit_softcapping": 30.0,
        "rope_parameters": _ROPE,
        "attention_bias": False,
        "torch_dtype": "bfloat16",
    }
    return {**base, **fields}


E2B = _text(
    hidden_size=1536, intermediate_size=6144, num_hidden_layers=35, num_attention_heads=8, num_key_value_heads=1,
    layer_types=_layer_types(35, 5), hidden_size_per_layer_input=256, vocab_size_per_layer_input=262_144,
    num_kv_shared_layers=20, use_double_wide_mlp=True,
)
DENSE_31B = _text(
    hidden_size=5376, intermediate_size=21_504, num_hidden_layers=60, num_attention_heads=32, num_key_value_heads=16,
    num_global_key_value_heads=4, attention_k_eq_v=True, layer_types=_layer_types(60, 6),
    hidden_size_per_layer_input=0, num_kv_shared_layers=0, max_position_embeddings=262_144,
)
MOE_26B = _text(
    hidden_size=2816, intermediate_size=2112, num_hidden_layers=30, num_attention_heads=16, num_key_value_heads=8,
    num_global_key_value_heads=2, attention_k_eq_v=True, layer_types=_layer_types(30, 6),
    hidden_size_per_layer_input=0, num_kv_shared_layers=0, enable_moe_block=True, num_experts=128,
    top_k_experts=8, moe_intermediate_size=704, max_position_embeddings=262_144,
)


def _wrapped(text: dict[str, Any], model_type: str = "gemma4", arch: str = "Gemma4ForConditionalGeneration") -> dict[str, Any]:
    return {
        "architectures": [arch],
        "model_type": model_type,
        "text_config": copy.deepcopy(text),
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 768, "num_hidden_layers": 16},
        "tie_word_embeddings": True,
    }


CASES = {
    "E2B (ConditionalGeneration)": _wrapped(E2B),
    "31B (ConditionalGeneration)": _wrapped(DENSE_31B),
    "26B-A4B (ConditionalGeneration)": _wrapped(MOE_26B),
    "31B (CausalLM)": {**copy.deepcopy(DENSE_31B), "architectures": ["Gemma4ForCausalLM"]},
    "unified": _wrapped({**DENSE_31B, "model_type": "gemma4_unified_text"}, "gemma4_unified",
                        "Gemma4UnifiedForConditionalGeneration"),
    "DiffusionGemma": _wrapped({**E2B, "model_type": "diffusion_gemma_text"}, "diffusion_gemma",
                               "DiffusionGemmaForBlockDiffusion"),
}


PLANNED = [name for name in sorted(CASES) if name != "DiffusionGemma"]


@pytest.mark.parametrize("name", PLANNED)
def test_gemma4_is_planned_layer_by_layer(name: str) -> None:
    """Before: refused in one line ("Gemma-4's per-layer attention shapes ... are not modelled")."""
    spec = spec_from_config(CASES[name], where="config.json", name=name)
    shape = spec.gemma4
    assert shape is not None and spec.param_count == parameter_count(shape)
    assert len(set(shape.head_dims)) == 2 and shape.layer_types[-1] == "full_attention"


def test_diffusion_gemma_stays_refused_in_one_line() -> None:
    with pytest.raises(BadInputError) as info:
        spec_from_config(CASES["DiffusionGemma"], where="config.json", name="dg")
    text = str(info.value)
    assert "\n" not in text and "diffusion_gemma.py" in text


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"quantization_config": {"quant_method": "fp8"}}, "quantised Gemma-4"),
        ({"attention_bias": True}, "attention_bias"),
        ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ],
)
def test_what_is_not_modelled_stays_refused(fields: dict[str, Any], needle: str) -> None:
    with pytest.raises(BadInputError, match=needle) as info:
        spec_from_config({**DENSE_31B, **fields}, where="config.json", name="x")
    assert "\n" not in str(info.value)


TRANSFORMERS = {"E2B": (E2B, 4_628_569_344), "31B": (DENSE_31B, 30_697_345_280), "26B-A4B": (MOE_26B, 25_233_141_760)}
"""transformers 5.19 Gemma4ForCausalLM(Gemma4TextConfig(**fields)) on the meta device, Σ parameters (the KV-shared
layers have no k / v / k_norm parameters there either)."""


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_parameters_are_transformers_count_plus_the_v_slots_exactly(name: str) -> None:
    """Per-layer inputs (E2B), KV-shared layers with a double-wide MLP (E2B), K = V global layers (31B, 26B-A4B) and
    the MoE block beside the dense MLP (26B-A4B): vLLM's count is transformers' + the V slots, exactly."""
    fields, transformers_count = TRANSFORMERS[name]
    shape = spec_from_config(fields, where="c", name=name).gemma4
    assert shape is not None
    terms = parameter_terms(shape)
    assert parameter_count(shape) - terms["v_slot_copies"] == transformers_count


def test_the_31b_shape_is_transformers_count_plus_the_v_slots() -> None:
    """31B shape: every global layer (10 of 60) holds a V slot of 4 KV heads × 512 × 5376 that transformers has not."""
    shape = spec_from_config(DENSE_31B, where="c", name="31b").gemma4
    assert shape is not None
    terms = parameter_terms(shape)
    assert terms["v_slot_copies"] == 10 * 4 * 512 * 5376


def test_e2b_shared_layers_hold_only_q_and_o_and_no_cache() -> None:
    """E2B: 35 layers, the last 20 KV-shared (q_proj, q_norm, o_proj; double-wide MLP); 15 layers own a cache
    (12 sliding, 3 full), and vLLM 0.32.0's grouping makes 4 sliding groups and 1 full group of 3 layers."""
    shape = spec_from_config(_wrapped(E2B), where="c", name="e2b").gemma4
    assert shape is not None
    h, hd = 1536, shape.head_dims[34]
    assert attention_elements(shape, 34) == 2 * 8 * hd * h + hd
    assert shape.kv_target(34) == 14 and shape.kv_target(33) == 13
    cache = gemma4_cache(shape)
    assert len(cache.layers) == 15
    assert [(g.kind, len(g.layers)) for g in cache.groups] == [("sliding_attention", 3)] * 4 + [("full_attention", 3)]


AUDIT = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "gemma4" / "kv_audit.json").read_text())


@pytest.mark.parametrize("case", sorted(AUDIT["cases"]))
def test_kv_groups_block_sizes_and_request_bytes_match_vllms_own_code(case: str) -> None:
    """vLLM 0.32.0's get_kv_cache_groups / _get_kv_cache_bytes_per_block / _max_memory_usage_bytes_from_groups on
    the same specs (scripts/gemma4_kv_audit.py, run on CPU in the engine venv): layout LBNHC (not block-outermost),
    so the pages are unified, not packed."""
    audit = AUDIT["cases"][case]
    config = json.loads(REAL_12B.read_text()) if case.startswith("gemma-4-12B") else _wrapped(E2B)
    shape = spec_from_config(config, where="c", name=case).gemma4
    assert shape is not None
    dtype = "fp8" if "float8" in audit["dtype"] else "auto"
    cache = gemma4_cache(shape, block_size=audit["block_size"], tp=audit["tp"], kv_cache_dtype=dtype)
    assert audit["layout"] == "LBNHC"
    assert cache.bytes_per_block == audit["bytes_per_block"]
    got = [([layer.layer for layer in g.layers], g.layers[0].block_size, g.page_bytes // len(g.layers))
           for g in cache.groups]
    assert got == [(g["layers"], g["block_size"], g["page_bytes"]) for g in audit["groups"]]
    for row in audit["requests"]:
        assert cache.request_bytes(row["max_model_len"], row["in_flight_tokens"]) == row["request_bytes"]


def test_kv_bytes_per_token_per_layer_kind_by_hand() -> None:
    """gemma-4-12B, bf16, TP 1: a sliding layer K + V = 2 × 8 heads × 256 × 2 B = 8,192 B per token (40 layers),
    a global layer 2 × 1 × 512 × 2 = 2,048 B (8 layers; K = V still writes both). Block 16: pages 131,072 and
    32,768 B; the global layers' block size becomes 64 so every page is 131,072 B; 6 groups of 8 layers, 1 MiB a
    block; one more token of context costs 1 MiB / 64 = 16,384 B (the full group's 8 × 2,048)."""
    shape = spec_from_config(json.loads(REAL_12B.read_text()), where="c", name="g").gemma4
    assert shape is not None
    cache = gemma4_cache(shape)
    assert cache.token_bytes_by_kind() == {"sliding_attention": 40 * 8192, "full_attention": 8 * 2048}
    assert {layer.block_size for layer in cache.layers if layer.kind == "full_attention"} == {64}
    assert cache.bytes_per_block == 8 * 131_072 and cache.bytes_per_token() == 16_384


def test_plan_of_a_gemma4_folder_plans_and_says_where_the_layout_comes_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: exit 2 with one line; now a plan whose notes name vLLM 0.32.0's Gemma-4 layout."""
    folder = tmp_path / "gemma-4-31B-it"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CASES["31B (ConditionalGeneration)"]))
    code = main(["plan", "--model", str(folder), "--gpu", "h200", "--engine-version", "0.32.0"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Gemma-4: per-layer head sizes" in out.out


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--engine-version", "0.18.0"], "0.19.0"),
        (["--engine-version", "0.32.0", "--pipeline-parallel-size", "2"], "pipeline"),
        (["--engine", "sglang"], "SGLang"),
    ],
)
def test_gemma4_refusals_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], needle: str
) -> None:
    folder = tmp_path / "gemma-4-31B-it"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CASES["31B (ConditionalGeneration)"]))
    code = main(["plan", "--model", str(folder), "--gpu", "h200", *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_lfm2_moe_without_layer_types_is_refused_not_planned_all_attention() -> None:
    """vLLM 0.32 lfm2_moe.py:433 indexes config.layer_types, which Lfm2MoeConfig leaves null: before, vramctl planned
    every layer as attention (11.1 B parameters, a KV cache in 24 layers instead of 6)."""
    config = {
        "model_type": "lfm2_moe", "architectures": ["Lfm2MoeForCausalLM"], "vocab_size": 65_536,
        "hidden_size": 2048, "intermediate_size": 7168, "moe_intermediate_size": 1792, "num_hidden_layers": 24,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_experts": 32, "num_experts_per_tok": 4,
        "num_dense_layers": 2, "max_position_embeddings": 128_000,
    }
    with pytest.raises(BadInputError, match="layer_types"):
        spec_from_config(config, where="config.json", name="lfm2-moe")


REAL_12B = Path(__file__).resolve().parents[1] / "fixtures" / "gemma4" / "gemma-4-12B" / "config.json"
"""google/gemma-4-12B's config.json (revision 56820d7d8cbe8e47975a53325439ed272e91cff2) as a public GitHub repository's
agent log quotes it in full (the towers' id2label / label2id boilerplate left out). transformers 5.19 builds its
language model (Gemma4UnifiedForCausalLM) on the meta device with 11,907,350,272 parameters: 40 sliding layers of
head size 256 with 8 KV heads, 8 global layers of head size 512 with 1 KV head and no v_proj (attention_k_eq_v),
MLPs of 15,360, a tied 262,144-row embedding. vLLM 0.32 loads the K weights of those 8 layers into a V slot too
(gemma4.py:86-123 `_get_qkv_shards`, :421-430), 15,728,640 more."""


def test_the_unified_wrapper_is_refused_before_the_source_it_was_read_from(capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma4UnifiedForConditionalGeneration came with vLLM PR #44429 (first release not pinned): planned from 0.32.0;
    the dense wrappers from 0.19.0 (the release notes' "Gemma 4 support")."""
    assert main(["plan", "--model", str(REAL_12B), "--gpu", "h200", "--engine-version", "0.31.0"]) == 2
    err = capsys.readouterr().err
    assert "0.32.0" in err and len(err.strip().splitlines()) == 1
    assert main(["plan", "--model", str(REAL_12B), "--gpu", "h200", "--engine-version", "0.32.0"]) == 0


def test_the_published_gemma4_12b_is_transformers_count_plus_the_v_slots_exactly() -> None:
    """Before: refused. Now 11,907,350,272 (transformers 5.19, meta device) + 15,728,640 (8 layers × 512 × 3840)."""
    config = json.loads(REAL_12B.read_text())
    spec = spec_from_config(config, where="gemma-4-12B config.json", name="google/gemma-4-12B")
    assert spec.gemma4 is not None
    terms = parameter_terms(spec.gemma4)
    assert terms["v_slot_copies"] == 8 * 512 * 3840 == 15_728_640
    assert spec.param_count == 11_907_350_272 + 15_728_640
    assert spec.weight_bytes == 2 * spec.param_count
    assert any(key == "vision_params" for key, _ in spec.sources)


def test_the_12b_plan_divides_the_pool_by_the_unified_block(capsys: pytest.CaptureFixture[str]) -> None:
    """H200, vLLM 0.32.0, 131,072 tokens: num_blocks = the KV bytes // 1 MiB (6 groups × 8 layers × 131,072 B); one
    request takes 2,048 blocks of the full group (64 tokens each) and 5 × (cdiv(1,023 + 16,384 in flight, 16) + 1)
    of the sliding groups: 7,493; KV tokens = num_blocks / 7,493 × 131,072 (`get_max_concurrency_for_kv_cache_config`).
    Before: refused."""
    code = main(["plan", "--model", str(REAL_12B), "--gpu", "h200", "--engine-version", "0.32.0",
                 "--max-model-len", "131072", "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == 0
    assert plan["bytes_per_block"] == 1_048_576 and plan["kv_bytes_per_token"] == 16_384
    assert plan["num_blocks"] == plan["kv_cache_bytes"] // 1_048_576
    assert plan["blocks_per_request"] == 2048 + 5 * (-(-(1023 + 16_384) // 16) + 1) == 7493
    assert plan["kv_tokens"] == int(plan["num_blocks"] / 7493 * 131_072)
