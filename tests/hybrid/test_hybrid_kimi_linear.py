"""Kimi-Linear (`kimi_linear`): Kimi Delta Attention (KDA) state layers + MLA full-attention layers + MoE.

Expected numbers are worked by hand from the config (tests/hybrid/configs/kimi-linear-48b-a3b-instruct, the public
config.json of moonshotai/Kimi-Linear-48B-A3B-Instruct) and vLLM 0.32.0's formulas:
- `MambaStateShapeCalculator.kda_state_shape` (vllm/model_executor/layers/mamba/mamba_utils.py): conv
  (num_heads × head_dim + 2 × num_heads × head_dim) / tp channels × (kernel − 1); recurrent (num_heads / tp,
  head_dim, head_dim);
- `MambaStateDtypeCalculator.kda_state_dtype`: conv in the model dtype, recurrent float32 under `auto`;
- `Platform._align_hybrid_block_size` (vllm/platforms/interface.py): MLA hybrids align the block to 128 tokens;
  the MLA page of one token is (kv_lora_rank + qk_rope_head_dim) × 2 B on every rank.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core import kv
from vramctl.core.errors import BadInputError
from vramctl.core.specs import FULL_ATTENTION, LINEAR_ATTENTION
from vramctl.registry import load_model
from vramctl.registry.describe import attention_kind
from vramctl.registry.models import spec_from_config

HERE = Path(__file__).parent
KIMI = HERE / "configs" / "kimi-linear-48b-a3b-instruct"

TRANSFORMERS_META_PARAMS = 49_122_675_072
"""sum(p.numel()) of transformers 5.19's KimiLinearForCausalLM built on the meta device from this config."""
SCORE_BIAS = 26 * 256
"""26 MoE layers × 256 experts of `e_score_correction_bias`: a buffer in transformers (not in parameters()), a
tensor of the checkpoint that vLLM loads."""


def kimi_config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((KIMI / "config.json").read_text())
    return data


def test_layer_pattern_from_linear_attn_config() -> None:
    spec = load_model(str(KIMI))
    full = [i + 1 for i, k in enumerate(spec.layer_types) if k == FULL_ATTENTION]
    assert full == [4, 8, 12, 16, 20, 24, 27]
    assert spec.layer_types.count(LINEAR_ATTENTION) == 20
    assert (spec.num_full_layers, spec.num_state_layers) == (7, 20)
    st = spec.state_space
    assert st is not None and st.kind == "kda"
    assert spec.mla is not None and spec.mla.latent_dim == 576
    assert attention_kind(spec) == "mla+kda"


def test_parameters_match_transformers_on_the_meta_device() -> None:
    spec = load_model(str(KIMI))
    assert spec.param_count == TRANSFORMERS_META_PARAMS + SCORE_BIAS
    assert spec.weight_bytes == spec.param_count * 2
    assert spec.moe is not None
    assert (spec.moe.num_experts_per_tok, spec.moe.num_shared_experts, spec.moe.shared_expert_intermediate_size) == (
        8,
        1,
        1024,
    )


@pytest.mark.parametrize(
    ("tp", "conv", "ssm", "page"),
    [
        # conv (4096 + 2 × 4096) × 3 × 2 B = 73,728; recurrent 32 × 128 × 128 × 4 B = 2,097,152
        (1, (12288, 3), (32, 128, 128), 73_728 + 2_097_152),
        (2, (6144, 3), (16, 128, 128), 36_864 + 1_048_576),
        (4, (3072, 3), (8, 128, 128), 18_432 + 524_288),
    ],
)
def test_state_bytes_per_layer(tp: int, conv: tuple[int, int], ssm: tuple[int, int, int], page: int) -> None:
    shapes = kv.state_shapes(load_model(str(KIMI)), tp=tp)
    assert (shapes.conv, shapes.ssm) == (conv, ssm)
    assert (shapes.conv_dtype_bytes, shapes.ssm_dtype_bytes) == (2, 4)
    assert shapes.page_bytes == page


def test_recurrent_dtype_flag() -> None:
    spec = load_model(str(KIMI))
    assert kv.state_shapes(spec, mamba_ssm_cache_dtype="bfloat16").ssm_bytes == 32 * 128 * 128 * 2
    with pytest.raises(BadInputError, match="KDA recurrent state supports only auto, float32, and bfloat16"):
        kv.state_shapes(spec, mamba_ssm_cache_dtype="float16")


@pytest.mark.parametrize(
    ("tp", "block", "padding"),
    [
        # 128 × cdiv(2,170,880, 128 × 1,152) = 128 × 15; (1920 × 1152 − 2,170,880) / 2,170,880 = 1.89 %
        (1, 1920, 1.89),
        # 128 × cdiv(1,085,440, 147,456) = 128 × 8
        (2, 1024, 8.68),
    ],
)
def test_mla_block_alignment_and_padding(tp: int, block: int, padding: float) -> None:
    hkv = kv.hybrid_kv(load_model(str(KIMI)), tp=tp, version=(0, 32, 0))
    assert hkv.attention_token_bytes == 576 * 2
    assert hkv.alignment == 128
    assert hkv.block_size == block
    assert round(hkv.padding_pct, 2) == padding


def test_groups() -> None:
    layout = kv.stage_layout(load_model(str(KIMI)).layer_types)
    # 7 MLA + 20 KDA layers: 20 ≥ 1.5 × 7, so groups of 7: one attention group, cdiv(20, 7) = 3 state groups
    assert layout.group_size == 7
    assert [g.kind for g in layout.groups] == [FULL_ATTENTION, kv.STATE_GROUP, kv.STATE_GROUP, kv.STATE_GROUP]


def test_plan_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "plan",
            str(KIMI),
            "--gpu",
            "H100",
            "-tp",
            "2",
            "--max-model-len",
            "131072",
            "--kv-cache-memory-bytes",
            "8GiB",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    h = json.loads(out.out)["hybrid"]
    assert h["state_kind"] == "kda"
    assert (h["full_attention_layers"], h["state_layers"]) == (7, 20)
    assert h["attention_block_size"] == 1024 and h["page_bytes"] == 1024 * 1152
    # 8 GiB // (7 layers × 1,179,648 B) = 1,040 blocks
    assert h["num_blocks"] == 8 * 2**30 // (7 * 1_179_648)
    # a 131,072-token request: cdiv(131072, 1024) = 128 MLA blocks + 3 state groups × 2 ('align')
    assert h["attention_blocks_per_request"] == 128 and h["state_blocks_per_request"] == 6
    assert h["max_concurrency"] == round(h["num_blocks"] / 134, 4)
    assert h["state_bytes_per_request"] == 20 * (36_864 + 1_048_576) * 2


def test_awq_checkpoint_scales_the_exact_total(tmp_path: Path) -> None:
    cfg = {
        **kimi_config(),
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
    }
    spec = spec_from_config(cfg, where="config.json", name="kimi-awq")
    plain = load_model(str(KIMI))
    assert spec.param_count == plain.param_count
    assert 0.25 < spec.weight_bytes / plain.weight_bytes < 0.35


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"linear_attn_config": None}, "field 'linear_attn_config'"),
        ({"linear_attn_config": {"kda_layers": [0, 1], "num_heads": 4, "head_dim": 8}}, "1-based layer numbers"),
    ],
)
def test_bad_linear_attn_config(change: dict[str, Any], needle: str) -> None:
    with pytest.raises(BadInputError, match=needle):
        spec_from_config({**kimi_config(), **change}, where="config.json", name="kimi")
