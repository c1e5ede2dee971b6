"""LFM2-MoE (`lfm2_moe`): short-convolution + attention layers, dense MLPs then MoE.

Expected numbers are worked by hand from the configs and vLLM 0.32.0's lfm2_moe.py: `Lfm2MoeModel` builds
Lfm2MoeAttentionDecoderLayer where `layer_types[i] == "full_attention"`, else Lfm2MoeShortConvDecoderLayer; each has
a gated Lfm2MoeMlp of intermediate_size when `layer_idx < num_dense_layers`, else Lfm2MoeSparseMoeBlock (num_experts
SwiGLU experts of moe_intermediate_size, a router, and with `use_expert_bias` a float32 e_score_correction_bias);
the lm_head is always tied. State: `Lfm2MoeForCausalLM.get_mamba_state_shape_from_config` →
`short_conv_state_shape(tp, hidden_size, conv_L_cache)`. tests/hybrid/configs/lfm2-8b-a1b holds the published
config.json fields of LiquidAI/LFM2-8B-A1B (https://huggingface.co/LiquidAI/LFM2-8B-A1B).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.core import kv
from vramctl.core.errors import BadInputError
from vramctl.core.params import active_param_count
from vramctl.core.specs import FULL_ATTENTION
from vramctl.registry import load_model
from vramctl.registry.models import spec_from_config

HERE = Path(__file__).parent
LFM2_MOE = HERE / "configs" / "lfm2-8b-a1b"

TRANSFORMERS_META_PARAMS = 8_339_929_856
"""sum(p.numel()) of transformers 5.19's Lfm2MoeForCausalLM built on the meta device from this config (its expert
bias is a buffer there)."""
VARIANT_META_PARAMS = 21_793_536
"""The same for `variant()`: 6 layers, 3 dense, no expert bias, conv biases."""


def config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((LFM2_MOE / "config.json").read_text())
    return data


def variant() -> dict[str, Any]:
    cfg = config()
    cfg.update(
        num_hidden_layers=6,
        layer_types=["conv", "full_attention", "conv", "conv", "full_attention", "conv"],
        num_dense_layers=3,
        use_expert_bias=False,
        conv_bias=True,
        hidden_size=512,
        intermediate_size=1024,
        moe_intermediate_size=256,
        num_experts=8,
        num_experts_per_tok=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=4096,
    )
    return cfg


def test_layers_and_experts() -> None:
    spec = load_model(str(LFM2_MOE))
    assert [i for i, k in enumerate(spec.layer_types) if k == FULL_ATTENTION] == [2, 6, 10, 14, 18, 21]
    assert (spec.num_full_layers, spec.num_state_layers) == (6, 18)
    assert spec.moe is not None and spec.moe.first_k_dense_replace == 2 and spec.moe.score_correction_bias
    assert spec.intermediate_size == 7168 and spec.tie_word_embeddings and spec.qk_norm


def test_parameters() -> None:
    spec = load_model(str(LFM2_MOE))
    # + the 22 MoE layers' e_score_correction_bias (32 each), a parameter in vLLM
    assert spec.param_count == TRANSFORMERS_META_PARAMS + 22 * 32 == 8_339_930_560
    # 4 of 32 experts per token (model card: 8.3B total, 1.5B active)
    experts = 22 * 32 * 3 * 2048 * 1792
    assert active_param_count(spec) == spec.param_count - experts + experts * 4 // 32 == 1_557_740_992
    assert spec_from_config(variant(), where="c", name="v").param_count == VARIANT_META_PARAMS


def test_state_and_block_size() -> None:
    spec = load_model(str(LFM2_MOE))
    # conv state (2048 / tp, 3 − 1) in bf16: 8,192 B at TP 1; attention 2 × 8 × 64 × 2 B = 2,048 B per token,
    # so one 16-token block (32,768 B) already holds it: block 16, the conv page padded to 32,768 B (300 %)
    shapes = kv.state_shapes(spec, tp=1)
    assert shapes.conv == (2048, 2) and shapes.ssm == () and shapes.page_bytes == 8192
    assert kv.hybrid_kv(spec, tp=1).block_size == 16
    assert kv.state_shapes(spec, tp=2).conv == (1024, 2)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"tie_word_embeddings": False}, "ties the lm_head"),
        ({"layer_types": ["conv"] * 24}, "no full_attention layer"),
        ({"layer_types": ["conv", "mamba"] * 12}, "'conv' / 'full_attention'"),
        ({"num_experts_per_tok": 64}, "exceeds the number of experts"),
    ],
)
def test_bad_configs_are_one_line(change: dict[str, Any], needle: str) -> None:
    with pytest.raises(BadInputError) as caught:
        spec_from_config({**config(), **change}, where="config.json", name="l")
    assert needle in str(caught.value) and "\n" not in str(caught.value)
