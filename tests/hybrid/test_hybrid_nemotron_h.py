"""Nemotron-H (`nemotron_h`): transformers-5 `layers_block_type` configs and MoE `E` layers.

Expected numbers are worked by hand from the configs and vLLM 0.32.0's nemotron_h.py: `NemotronHModel` builds
`len(config.hybrid_override_pattern)` layers from `ALL_DECODER_LAYER_TYPES` (M NemotronHMambaDecoderLayer, *
NemotronHAttentionDecoderLayer, - NemotronHMLPDecoderLayer, E NemotronHMoEDecoderLayer); transformers 5
(configuration_nemotron_h.py) writes the pattern as `layers_block_type` and derives `hybrid_override_pattern` and
`num_hidden_layers` from it. tests/hybrid/configs/nemotron-3-nano-30b-a3b holds the published config.json fields of
nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 (https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core import kv
from vramctl.core.errors import BadInputError
from vramctl.core.params import active_param_count
from vramctl.core.specs import FULL_ATTENTION, MAMBA, MLP_ONLY
from vramctl.registry import load_model
from vramctl.registry.models import spec_from_config

HERE = Path(__file__).parent
NANO3 = HERE / "configs" / "nemotron-3-nano-30b-a3b"
NANO2 = HERE / "configs" / "nvidia-nemotron-nano-9b-v2"

NANO3_META_PARAMS = 31_577_937_344
"""sum(p.numel()) of transformers 5.19's NemotronHForCausalLM built on the meta device from the Nano-3 config."""
VARIANT_META_PARAMS = 2_136_256
"""The same for `variant()`."""
_NAMES = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


def nano3() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((NANO3 / "config.json").read_text())
    return data


def as_transformers5(cfg: dict[str, Any], names: dict[str, str] = _NAMES) -> dict[str, Any]:
    """The config as transformers 5 saves it: `layers_block_type`, no pattern string, no num_hidden_layers."""
    out = {k: v for k, v in cfg.items() if k not in ("hybrid_override_pattern", "num_hidden_layers")}
    out["layers_block_type"] = [names[c] for c in cfg["hybrid_override_pattern"]]
    return out


def variant() -> dict[str, Any]:
    """8 layers in the transformers-5 spelling (legacy mamba / attention names mixed in), latent MoE, biases."""
    cfg = {k: v for k, v in nano3().items() if k not in ("hybrid_override_pattern", "num_hidden_layers")}
    cfg.update(
        layers_block_type=[
            "mamba",
            "moe",
            "attention",
            "mlp",
            "linear_attention",
            "moe",
            "full_attention",
            "mlp",
        ],
        hidden_size=256,
        intermediate_size=384,
        moe_intermediate_size=96,
        moe_shared_expert_intermediate_size=128,
        n_shared_experts=2,
        n_routed_experts=8,
        num_experts_per_tok=2,
        mamba_num_heads=8,
        mamba_head_dim=32,
        n_groups=2,
        ssm_state_size=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=1000,
        moe_latent_size=64,
        mlp_bias=True,
        use_bias=True,
        max_position_embeddings=4096,
    )
    return cfg


def test_nano3_layers() -> None:
    spec = load_model(str(NANO3))
    assert spec.num_hidden_layers == 52
    counts = {kind: spec.layer_types.count(kind) for kind in (MAMBA, FULL_ATTENTION, MLP_ONLY)}
    assert counts == {MAMBA: 23, FULL_ATTENTION: 6, MLP_ONLY: 23}  # the 23 MLP_ONLY layers are the E layers
    assert spec.moe is not None and len(spec.moe.layer_indices) == 23
    assert spec.moe.layer_indices[:3] == (1, 3, 6)
    assert not spec.moe.gated_experts and spec.moe.shared_expert_intermediate_size == 3712


def test_both_spellings_plan_the_same() -> None:
    legacy = spec_from_config(nano3(), where="config.json", name="n")
    new = spec_from_config(as_transformers5(nano3()), where="config.json", name="n")
    old_names = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}
    older = spec_from_config(as_transformers5(nano3(), old_names), where="config.json", name="n")
    for spec in (new, older):
        assert spec.layer_types == legacy.layer_types
        assert spec.num_hidden_layers == 52
        assert spec.param_count == legacy.param_count
        assert spec.moe == legacy.moe and spec.state_space == legacy.state_space
    # the 9B-v2's M / * / - pattern too
    nano2 = json.loads((NANO2 / "config.json").read_text())
    assert (
        spec_from_config(as_transformers5(nano2), where="c", name="n").layer_types
        == spec_from_config(nano2, where="c", name="n").layer_types
    )


def test_nano3_parameters() -> None:
    # transformers keeps e_score_correction_bias as a buffer; vLLM's NemotronHMoE loads it as a parameter
    # (gate.e_score_correction_bias, n_routed_experts float32 values): + 23 × 128
    spec = load_model(str(NANO3))
    assert spec.param_count == NANO3_META_PARAMS + 23 * 128 == 31_577_940_288
    assert spec.weight_bytes == 2 * spec.param_count
    # routed experts per E layer: 128 × 2 × 2688 × 1856; 6 of 128 are active per token (model card: 3.6B active
    # with embeddings)
    experts = 23 * 128 * 2 * 2688 * 1856
    assert active_param_count(spec) == spec.param_count - experts + experts * 6 // 128 == 3_580_076_352


def test_latent_moe_and_biases_follow_vllm() -> None:
    # vLLM differs from transformers 5.19 on this config in two places, both in the shared experts of each of
    # the 2 E layers: NemotronHMoE sizes them moe_shared_expert_intermediate_size × n_shared_experts (2 × 128;
    # transformers: 128) and builds them without biases (transformers: with mlp_bias, 128 + 256); and the router's
    # e_score_correction_bias (8) is a parameter. Latent projections, latent experts, MLP and Mamba biases agree.
    spec = spec_from_config(variant(), where="config.json", name="v")
    shared_vllm, shared_transformers = 2 * 256 * 256, 2 * 256 * 128 + 128 + 256
    assert spec.param_count == VARIANT_META_PARAMS + 2 * (shared_vllm - shared_transformers + 8)
    assert spec.moe is not None and spec.moe.latent_size == 64 and spec.moe.layer_indices == (1, 5)


def test_nano3_state_and_block_size() -> None:
    spec = load_model(str(NANO3))
    # Mamba2 at TP 1: conv_dim = 64 × 64 + 2 × 8 × 128 = 6,144 → (6144, 3); SSM (64, 64, 128). The config's
    # mamba_ssm_cache_dtype float32 is what vLLM uses under `auto` (NemotronHForCausalLMConfig,
    # vllm/model_executor/models/config.py): 36,864 + 2,097,152 = 2,134,016 B. Attention: 2 × 2 × 128 × 2 B =
    # 1,024 B per token; block = 16 × cdiv(2,134,016, 16 × 1,024) = 16 × 131 = 2,096 tokens.
    shapes = kv.state_shapes(spec, tp=1, mamba_ssm_cache_dtype="float32")
    assert shapes.conv == (6144, 3) and shapes.ssm == (64, 64, 128)
    assert shapes.page_bytes == 36_864 + 2_097_152
    hybrid = kv.hybrid_kv(spec, tp=1, mamba_ssm_cache_dtype="float32")
    assert hybrid.block_size == 2096


def test_plan_cli(capsys: pytest.CaptureFixture[str]) -> None:
    # 690 blocks of 2,096 tokens: the default max_num_seqs (1024) exceeds them (vLLM ≥ 0.23 stops at CUDA-graph
    # set-up, as users report for Nemotron-Nano-v2 and Qwen3.6 on H100: vLLM issue #49064); 512 fits
    code = main(
        ["plan", str(NANO3), "--gpu", "H100", "--max-model-len", "131072", "--max-num-seqs", "512", "--json",
         "--engine-version", "0.33.0"]  # the worked numbers: 0.33's hybrid alignment (16; 64 from 0.34)
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    hybrid = out["hybrid"]
    assert (hybrid["full_attention_layers"], hybrid["state_layers"], hybrid["mlp_only_layers"]) == (6, 23, 23)
    assert out["block_size"] == 2096


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"layers_block_type": ["linear_attention", "conv"]}, "'layers_block_type' must list"),
        ({"layers_block_type": "M*"}, "'layers_block_type' must list"),
        ({"hybrid_override_pattern": "MEX*"}, "'X' layers"),
        ({"hybrid_override_pattern": "-E*E", "num_hidden_layers": 4}, "no Mamba ('M') layer"),
        ({"num_experts_per_tok": 200}, "exceeds the number of experts"),
    ],
)
def test_bad_patterns_are_one_line(change: dict[str, Any], needle: str) -> None:
    cfg = {k: v for k, v in nano3().items() if k not in ("hybrid_override_pattern", "num_hidden_layers")}
    cfg["hybrid_override_pattern"] = "MEM*"
    with pytest.raises(BadInputError, match=None) as caught:
        spec_from_config({**cfg, **change}, where="config.json", name="n")
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_only_the_registered_nemotron_h_architectures_get_the_float32_state() -> None:
    # vLLM 0.32 MODELS_CONFIG_MAP (model_executor/models/config.py) runs NemotronH's ssm-dtype hook for
    # NemotronHForCausalLM / NemotronHPuzzleForCausalLM / NemotronH_Nano_VL_V2 only; the Omni wrapper keeps `auto`
    from vramctl.core.engines.vllm.rules import default_mamba_ssm_cache_dtype

    assert default_mamba_ssm_cache_dtype("NemotronHForCausalLM", None, "0.32.0") == "float32"
    assert default_mamba_ssm_cache_dtype("NemotronH_Nano_VL_V2", "bfloat16", "0.32.0") == "bfloat16"
    assert default_mamba_ssm_cache_dtype("NemotronH_Omni_Reasoning_V3", "float32", "0.32.0") == "auto"
    assert default_mamba_ssm_cache_dtype("NemotronHForCausalLM", None, "0.11.0") == "auto"
