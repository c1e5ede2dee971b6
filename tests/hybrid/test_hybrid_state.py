"""Hybrid attention + Mamba2 / Gated DeltaNet models: per-layer state, vLLM's page-size unification, groups.

Every expected number is worked by hand from the config fields and the engines' formulas (docs/hybrid.md):
- vLLM `MambaStateShapeCalculator.mamba2_state_shape` / `gated_delta_net_state_shape`: conv (conv_dim / tp,
  kernel − 1), SSM (heads / tp, head_dim, state); the dtypes follow the model (bf16, 2 B) unless
  --mamba-ssm-cache-dtype says otherwise;
- HybridAttentionMambaModelConfig / `_align_hybrid_block_size`: block = 16 × cdiv(mamba page, 16 × attention page of
  one token), the mamba page padded to block × that page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as hs

from vramctl.core import kv
from vramctl.core.errors import BadInputError
from vramctl.core.specs import FULL_ATTENTION, LINEAR_ATTENTION, MAMBA, MLP_ONLY, ModelSpec
from vramctl.registry.catalog_models import model_from_profile
from vramctl.registry.models import spec_from_config

HERE = Path(__file__).parent
PROFILES = HERE.parents[1] / "profiles" / "models"
CONFIGS = HERE / "configs"
QWEN = "qwen3-next-80b-a3b-instruct"
NEMOTRON = "nvidia-nemotron-nano-9b-v2"


def profile(slug: str) -> ModelSpec:
    path = PROFILES / f"{slug}.yaml"
    return model_from_profile(yaml.safe_load(path.read_text()), str(path))


def config(slug: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((PROFILES / f"{slug}.yaml").read_text())["config"]
    return data


# --- the layer pattern --------------------------------------------------------------------------------------


def test_qwen3_next_pattern_from_full_attention_interval() -> None:
    spec = profile(QWEN)
    assert spec.layer_types[:4] == (LINEAR_ATTENTION, LINEAR_ATTENTION, LINEAR_ATTENTION, FULL_ATTENTION)
    assert (spec.num_full_layers, spec.num_state_layers) == (12, 36)
    st = spec.state_space
    assert st is not None and st.kind == "gated_delta_net"
    assert (st.num_heads, st.head_dim, st.state_size, st.n_groups, st.conv_kernel) == (32, 128, 128, 16, 4)


def test_nemotron_h_pattern_characters() -> None:
    spec = profile(NEMOTRON)
    counts = {kind: spec.layer_types.count(kind) for kind in (MAMBA, FULL_ATTENTION, MLP_ONLY)}
    assert counts == {MAMBA: 27, FULL_ATTENTION: 4, MLP_ONLY: 25}
    assert spec.num_full_layers == 4 and spec.num_state_layers == 27


def test_granite_4_h_layer_types() -> None:
    cfg = {
        "architectures": ["GraniteMoeHybridForCausalLM"],
        "model_type": "granitemoehybrid",
        "hidden_size": 1536,
        "intermediate_size": 4096,
        "shared_intermediate_size": 4096,
        "num_hidden_layers": 8,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "vocab_size": 100352,
        "max_position_embeddings": 131072,
        "layer_types": ["mamba"] * 3 + ["attention"] + ["mamba"] * 3 + ["attention"],
        "mamba_n_heads": 48,
        "mamba_d_head": 64,
        "mamba_d_state": 128,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "tie_word_embeddings": True,
    }
    spec = spec_from_config(cfg, where="config.json", name="granite")
    assert (spec.num_full_layers, spec.num_state_layers) == (2, 6)
    st = spec.state_space
    assert st is not None and st.intermediate_size == 2 * 1536
    # n_groups 1 does not divide tp 2: vLLM replicates groups to tp (extra_groups_for_head_shards):
    # conv_dim = 3072 + 2 × 2 × 128 = 3584 → 1792 per rank; SSM (24, 64, 128).
    shapes = kv.state_shapes(spec, tp=2)
    assert shapes.conv == (1792, 3) and shapes.ssm == (24, 64, 128)
    # Without Mamba layers it is a plain attention model.
    plain = spec_from_config({**cfg, "layer_types": ["attention"] * 8}, where="config.json", name="g")
    assert plain.state_space is None and plain.layer_types == ()


GRANITE_H_DENSE = {
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "model_type": "granitemoehybrid",
    "hidden_size": 1536,
    "intermediate_size": 4096,
    "shared_intermediate_size": 4096,
    "num_local_experts": 0,
    "num_hidden_layers": 8,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "vocab_size": 100352,
    "max_position_embeddings": 131072,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
    "mamba_n_heads": 48,
    "mamba_d_head": 64,
    "mamba_d_state": 128,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "tie_word_embeddings": True,
}
"""A Granite-4.0-H-shaped config as transformers 5 writes it: layer_types of linear_attention / full_attention."""
GRANITE_H_DENSE_META_PARAMS = 405_600_096
"""sum(p.numel()) of transformers 5.19's GraniteMoeHybridForCausalLM built on the meta device from it."""
GRANITE_H_MOE_META_PARAMS = 635_335_296
"""The same for `granite_h_moe()`: 4 experts of 512, mamba_proj_bias, d_head `auto`, untied, old spelling."""


def granite_h_moe() -> dict[str, Any]:
    return {
        **GRANITE_H_DENSE,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "intermediate_size": 512,
        "mamba_d_head": "auto",
        "mamba_proj_bias": True,
        "tie_word_embeddings": False,
        "layer_types": ["mamba"] * 3 + ["attention"] + ["mamba"] * 3 + ["attention"],
    }


def test_granite_4_h_both_layer_type_spellings_plan_the_same() -> None:
    new = spec_from_config(GRANITE_H_DENSE, where="config.json", name="g")
    legacy_names = {"linear_attention": "mamba", "full_attention": "attention"}
    old_cfg = {**GRANITE_H_DENSE, "layer_types": [legacy_names[k] for k in GRANITE_H_DENSE["layer_types"]]}
    old = spec_from_config(old_cfg, where="config.json", name="g")
    assert new.layer_types == old.layer_types
    assert [i for i, k in enumerate(new.layer_types) if k == FULL_ATTENTION] == [3, 7]
    assert (new.num_full_layers, new.num_state_layers) == (2, 6)
    assert new.state_space == old.state_space and new.param_count == old.param_count
    # Mamba2 at TP 1: conv_dim = 2 × 1536 + 2 × 1 × 128 = 3328, (3328, 3) × 2 B; SSM (48, 64, 128) × 2 B
    shapes = kv.state_shapes(new, tp=1)
    assert shapes.conv == (3328, 3) and shapes.ssm == (48, 64, 128)
    assert shapes.page_bytes == 3328 * 3 * 2 + 48 * 64 * 128 * 2 == 806_400


def test_granite_4_h_parameters_match_transformers() -> None:
    assert spec_from_config(GRANITE_H_DENSE, where="c", name="g").param_count == GRANITE_H_DENSE_META_PARAMS
    moe = spec_from_config(granite_h_moe(), where="c", name="g")
    assert moe.param_count == GRANITE_H_MOE_META_PARAMS
    assert moe.state_space is not None and moe.state_space.head_dim == 3072 // 48  # `auto`


def test_granite_4_h_vllm_block_size() -> None:
    # vLLM ≥ 0.10.2 `HybridAttentionMambaModelConfig`: attention page of one token = 2 × 4 × 128 × 2 B = 2,048 B;
    # block = 16 × cdiv(806,400, 16 × 2,048) = 16 × 25 = 400 tokens
    spec = spec_from_config(GRANITE_H_DENSE, where="config.json", name="g")
    assert kv.hybrid_kv(spec, tp=1).block_size == 400


def test_granite_4_h_without_attention_is_state_only_and_unknown_layers_are_refused() -> None:
    # every layer Mamba2 (declared, or `layer_types` absent: the config's default) has no attention layer,
    # planned as vLLM's state-only pool (tests/hybrid/test_pure_mamba.py)
    spec = spec_from_config({**GRANITE_H_DENSE, "layer_types": ["linear_attention"] * 8}, where="c", name="g")
    assert spec.is_state_only and not spec.is_attention_free and spec.num_state_layers == 8
    no_types = {k: v for k, v in GRANITE_H_DENSE.items() if k != "layer_types"}
    assert spec_from_config(no_types, where="c", name="g").is_state_only
    with pytest.raises(BadInputError, match="'linear_attention' / 'full_attention'"):
        spec_from_config({**GRANITE_H_DENSE, "layer_types": ["sliding_attention"] * 8}, where="c", name="g")


# --- per-layer state bytes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slug", "tp", "conv", "ssm", "page"),
    [
        # Qwen3-Next GDN: conv_dim = 2 × 16 × 128 + 32 × 128 = 8192; SSM (32 / tp, 128, 128); bf16.
        (QWEN, 1, (8192, 3), (32, 128, 128), 8192 * 3 * 2 + 32 * 128 * 128 * 2),  # 49,152 + 1,048,576
        (QWEN, 4, (2048, 3), (8, 128, 128), 12_288 + 262_144),
        # Nemotron-Nano-9B-v2 Mamba2: conv_dim = 128 × 80 + 2 × 8 × 128 = 12,288; SSM (128 / tp, 80, 128).
        (NEMOTRON, 1, (12288, 3), (128, 80, 128), 73_728 + 2_621_440),
        (NEMOTRON, 4, (3072, 3), (32, 80, 128), 18_432 + 655_360),
    ],
)
def test_state_bytes_per_layer(slug: str, tp: int, conv: Any, ssm: Any, page: int) -> None:
    shapes = kv.state_shapes(profile(slug), tp=tp)
    assert (shapes.conv, shapes.ssm, shapes.page_bytes) == (conv, ssm, page)


def test_ssm_state_dtype_flag() -> None:
    shapes = kv.state_shapes(profile(QWEN), tp=4, mamba_ssm_cache_dtype="float32")
    assert shapes.conv_bytes == 12_288 and shapes.ssm_bytes == 8 * 128 * 128 * 4
    with pytest.raises(BadInputError, match="--mamba-ssm-cache-dtype fp8"):
        kv.state_shapes(profile(QWEN), tp=4, mamba_ssm_cache_dtype="fp8")


def test_tp_must_split_the_state() -> None:
    with pytest.raises(BadInputError, match="--tensor-parallel-size 3"):
        kv.state_shapes(profile(QWEN), tp=3)


# --- vLLM's page-size unification -----------------------------------------------------------------------------


def test_qwen3_next_tp4_block_size_and_padding() -> None:
    # attention page per token = max(1, 2 // 4) × 256 × 2 × 2 = 1,024 B; mamba page 274,432 B;
    # block = 16 × cdiv(274,432, 16,384) = 16 × 17 = 272; page 278,528; padding 4,096 / 274,432 = 1.49 %.
    h = kv.hybrid_kv(profile(QWEN), tp=4)
    assert (h.attention_token_bytes, h.state_page_bytes) == (1024, 274_432)
    assert (h.block_size, h.page_bytes, h.block_size_raised) == (272, 278_528, True)
    assert f"{h.padding_pct:.2f}" == "1.49"


def test_qwen3_next_tp2_block_size() -> None:
    # a1 = 1 × 256 × 2 × 2 = 1,024; mamba page = 4096 × 3 × 2 + 16 × 128 × 128 × 2 = 548,864;
    # block = 16 × cdiv(548,864, 16,384) = 16 × 34 = 544; padding 8,192 / 548,864 = 1.49 %.
    h = kv.hybrid_kv(profile(QWEN), tp=2)
    assert (h.block_size, h.page_bytes) == (544, 557_056)


def test_nemotron_nano_tp1_block_size_and_padding() -> None:
    # a1 = 8 × 128 × 2 × 2 = 4,096; mamba page 2,695,168; block = 16 × cdiv(2,695,168, 65,536) = 16 × 42 = 672;
    # page 672 × 4,096 = 2,752,512; padding 57,344 / 2,695,168 = 2.13 %.
    h = kv.hybrid_kv(profile(NEMOTRON), tp=1)
    assert (h.block_size, h.page_bytes, f"{h.padding_pct:.2f}") == (672, 2_752_512, "2.13")


def test_user_block_size_and_version() -> None:
    qwen = profile(QWEN)
    # 0.33: the alignment is max(16, --block-size 32) → 32 × cdiv(274,432, 32 × 1,024) = 32 × 9 = 288.
    assert kv.hybrid_kv(qwen, tp=4, user_block_size=32, version=(0, 33, 0)).block_size == 288
    # 0.11 (config.py): a smaller user block is replaced by the 16-aligned minimum, 272.
    assert kv.hybrid_kv(qwen, tp=4, user_block_size=32, version=(0, 11, 0)).block_size == 272
    # A block already large enough is kept (no "Setting attention block size" line).
    big = kv.hybrid_kv(qwen, tp=4, user_block_size=512, version=(0, 11, 0))
    assert (big.block_size, big.block_size_raised) == (512, False)
    # Blackwell (SM 10.x) with head_dim 256 under FlashInfer aligns to 32: 288.
    assert kv.hybrid_kv(qwen, tp=4, compute_capability="10.0").block_size == 288
    assert kv.hybrid_kv(qwen, tp=4, compute_capability="9.0").block_size == 272


def test_fp8_kv_halves_the_attention_page_and_doubles_the_block() -> None:
    # a1 = 1 × 256 × 2 × 1 = 512; block = 16 × cdiv(274,432, 8,192) = 16 × 34 = 544; page 278,528 (same bytes).
    h = kv.hybrid_kv(profile(QWEN), tp=4, kv_cache_dtype="fp8")
    assert (h.attention_token_bytes, h.block_size, h.page_bytes) == (512, 544, 278_528)


@settings(max_examples=60, deadline=None)
@given(
    tp=hs.sampled_from([1, 2, 4, 8, 16]),
    kv_dtype=hs.sampled_from(["auto", "fp8"]),
    ssm=hs.sampled_from(["auto", "float32"]),
    slug=hs.sampled_from([QWEN, NEMOTRON]),
)
def test_unified_block_is_the_smallest_aligned_that_holds_the_state(
    tp: int, kv_dtype: str, ssm: str, slug: str
) -> None:
    spec = profile(slug)
    if slug == NEMOTRON and tp == 16:
        return  # 40 heads do not split over 16 ranks
    h = kv.hybrid_kv(spec, tp=tp, kv_cache_dtype=kv_dtype, mamba_ssm_cache_dtype=ssm)
    assert h.block_size % h.alignment == 0
    assert h.page_bytes >= h.state_page_bytes
    assert (h.block_size - h.alignment) * h.attention_token_bytes < h.state_page_bytes
    assert 0 <= h.padding_pct < 100


# --- groups and blocks per request ------------------------------------------------------------------------------


def test_groups_of_qwen3_next_and_nemotron() -> None:
    qwen = kv.stage_layout(profile(QWEN).layer_types)
    # 12 attention + 36 GDN layers: 36 ≥ 1.5 × 12 → groups of 12: 1 attention + 3 state groups.
    assert qwen.group_size == 12
    assert [g.kind for g in qwen.groups] == [FULL_ATTENTION] + [kv.STATE_GROUP] * 3
    nemo = kv.stage_layout(profile(NEMOTRON).layer_types)
    # 4 attention + 27 Mamba2 (MLP layers hold nothing): groups of 4; cdiv(27, 4) = 7 state groups, 1 padding.
    assert nemo.group_size == 4 and len(nemo.groups) == 8
    assert sum(g.padding_layers for g in nemo.groups) == 1


def test_blocks_and_bytes_per_request() -> None:
    qwen = profile(QWEN)
    # max_model_len 32,768, block 272: cdiv(32,768, 272) = 121 attention blocks + 3 state blocks.
    bpr = kv.blocks_per_request(
        qwen, max_model_len=32768, block_size=272, max_num_batched_tokens=8192, version=(0, 33, 0)
    )
    assert bpr == 121 + 3
    needed = kv.per_request_kv_bytes(
        qwen, max_model_len=32768, block_size=272, max_num_batched_tokens=8192, version=(0, 33, 0), tp=4
    )
    # 12 attention layers × 121 pages + 36 state layers × 1 page, page 278,528 B.
    assert needed == (12 * 121 + 36) * 278_528
    assert kv.bytes_per_block(qwen, block_size=272, tp=4) == 12 * 278_528
    # Per token only attention costs: 12 layers × 1,024 B.
    assert kv.kv_bytes_per_token(qwen, tp=4) == 12 * 1024


# --- the profiles ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("slug", [QWEN, NEMOTRON])
def test_profile_param_count_is_the_config_formula(slug: str) -> None:
    spec = spec_from_config(config(slug), where="config.json", name=slug)
    assert profile(slug).param_count == spec.param_count
    assert profile(slug).weight_bytes == 2 * spec.param_count  # bf16, unquantised


@pytest.mark.parametrize("slug", [QWEN, NEMOTRON])
def test_config_fixture_is_the_profile_config(slug: str) -> None:
    assert json.loads((CONFIGS / slug / "config.json").read_text()) == config(slug)


def test_hand_counted_parameters() -> None:
    # Qwen3-Next: attention 16,777,216 (q + gate) + 2 × 1,048,576 (k, v) + 8,388,608 (o) + 512 (q/k norm);
    # GDN 25,165,824 + 131,072 + 32,768 + 64 + 128 + 8,388,608; MoE 512 × 3,145,728 + 1,048,576 + 3,145,728 + 2,048.
    attention, gdn, moe = 27_263_488, 33_718_464, 1_614_809_088
    assert (
        profile(QWEN).param_count == 12 * attention + 36 * gdn + 48 * (moe + 4096) + 2 * 151936 * 2048 + 2048
    )
    # Nemotron-Nano-9B-v2: Mamba2 block 147,450,624, attention block 55,054,720, MLP block 140,497,280.
    nemo = 27 * 147_450_624 + 4 * 55_054_720 + 25 * 140_497_280 + 2 * 131072 * 4480 + 4480
    assert profile(NEMOTRON).param_count == nemo == 8_888_227_328


def test_olmo_hybrid_gated_delta_net_and_whole_qk_norm() -> None:
    # transformers 5.19's default OlmoHybridConfig (the arch audit's fixture): 3 GDN + 1 attention, × 8
    fixture = json.loads((HERE.parents[0] / "fixtures" / "arch_audit" / "OlmoHybridForCausalLM.json").read_text())
    spec = spec_from_config(fixture["config"], where="config.json", name="olmo-hybrid")
    assert spec.layer_types[:4] == (LINEAR_ATTENTION,) * 3 + (FULL_ATTENTION,)
    assert (spec.num_full_layers, spec.num_state_layers) == (8, 24)
    assert spec.qk_norm_whole and spec.head_dim == 3840 // 30
    assert spec.param_count == fixture["transformers_params"] == 7_430_870_688
    # vLLM 0.32 olmo_hybrid.py → gated_delta_net_state_shape: conv (2 × 30 × 96 + 30 × 192 = 11,520, 3), SSM (30,
    # 192, 96), bf16: 69,120 + 1,105,920 = 1,175,040 B; attention 2 × 30 × 128 × 2 B = 15,360 B per token →
    # block 16 × cdiv(1,175,040, 16 × 15,360) = 80
    shapes = kv.state_shapes(spec, tp=1)
    assert shapes.conv == (11520, 3) and shapes.ssm == (30, 192, 96) and shapes.page_bytes == 1_175_040
    assert kv.hybrid_kv(spec, tp=1).block_size == 80
