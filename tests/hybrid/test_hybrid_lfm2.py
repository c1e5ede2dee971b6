"""LFM2 (`lfm2`): short-convolution layers beside full-attention layers.

Expected numbers are worked by hand from the config (tests/hybrid/configs/lfm2-1.2b: LiquidAI/LFM2-1.2B's
published config.json fields) and vLLM 0.32.0's formulas: `Lfm2ForCausalLM.get_mamba_state_shape_from_config`
(vllm/model_executor/models/lfm2.py) → `MambaStateShapeCalculator.short_conv_state_shape(tp, conv_dim,
conv_L_cache)`: one conv state (conv_dim / tp, conv_L_cache − 1) in the model dtype, no SSM state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core import kv
from vramctl.core.errors import BadInputError
from vramctl.core.specs import FULL_ATTENTION
from vramctl.registry import load_model
from vramctl.registry.models import spec_from_config

HERE = Path(__file__).parent
LFM2 = HERE / "configs" / "lfm2-1.2b"

TRANSFORMERS_META_PARAMS = 1_170_340_608
"""sum(p.numel()) of transformers 5.19's Lfm2ForCausalLM built on the meta device from this config."""
VARIANT_META_PARAMS = 631_310_464
"""The same for `variant()`: 4 layers (attention at 1), conv_bias, block_ffn_dim_multiplier 1.5 rounded to 64,
untied embeddings."""


def lfm2_config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((LFM2 / "config.json").read_text())
    return data


def variant() -> dict[str, Any]:
    cfg = lfm2_config()
    cfg.update(
        conv_bias=True,
        block_ffn_dim_multiplier=1.5,
        block_multiple_of=64,
        tie_embedding=False,
        num_hidden_layers=4,
        full_attn_idxs=[1],
    )
    return cfg


def test_layers_and_mlp_width() -> None:
    spec = load_model(str(LFM2))
    assert [i for i, k in enumerate(spec.layer_types) if k == FULL_ATTENTION] == [2, 5, 8, 10, 12, 14]
    assert (spec.num_full_layers, spec.num_state_layers) == (6, 10)
    # block_ff_dim 12288 → int(2 × 12288 / 3) = 8192 × 1.0, a multiple of 256 (Lfm2MLP)
    assert spec.intermediate_size == 8192 and spec.tie_word_embeddings


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [(lfm2_config(), TRANSFORMERS_META_PARAMS), (variant(), VARIANT_META_PARAMS)],
    ids=["1.2b", "variant"],
)
def test_parameters_match_transformers_on_the_meta_device(cfg: dict[str, Any], expected: int) -> None:
    assert spec_from_config(cfg, where="config.json", name="lfm2").param_count == expected


@pytest.mark.parametrize(("tp", "channels"), [(1, 2048), (4, 512)])
def test_conv_state_only(tp: int, channels: int) -> None:
    shapes = kv.state_shapes(load_model(str(LFM2)), tp=tp)
    assert (shapes.conv, shapes.ssm) == ((channels, 2), ())
    assert (shapes.ssm_bytes, shapes.page_bytes) == (0, channels * 2 * 2)


def test_plan_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--engine-version", "0.33.0", "--gpu", "L4", "--max-model-len", "32768", "--kv-cache-memory-bytes", "4GiB"]
    code = main(["plan", str(LFM2), *args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    h = json.loads(out.out)["hybrid"]
    assert h["state_kind"] == "short_conv" and h["ssm_state_shape"] == []
    # conv state 2048 × 2 × 2 B = 8,192 B; attention 8 KV heads × 64 × 2 × 2 B = 2,048 B per token: the plain
    # 16-token block already holds it (32,768 B page, padding 300 %)
    assert (h["state_page_bytes"], h["attention_block_size"], h["page_bytes"]) == (8192, 16, 32_768)
    # 6 attention + 10 conv layers: groups of 6 (10 ≥ 1.5 × 6), 1 attention + 2 state groups
    assert (h["group_size"], h["attention_groups"], h["state_groups"]) == (6, 1, 2)
    assert h["num_blocks"] == 4 * 2**30 // (6 * 32_768)
    # cdiv(32768, 16) = 2048 attention blocks + 2 groups × 2 ('align'; short-conv layers add no checkpoint block)
    assert (h["attention_blocks_per_request"], h["state_blocks_per_request"]) == (2048, 4)


def test_engine_case_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny LFM2 of tests/engine/configs/lfm2-hybrid as vLLM 0.32.0's CPU build ran it (512 blocks of 128
    tokens, 52,428 tokens, 51.2x, "Padding mamba page size by 6300.00%"; tests/engine/cases.yaml
    `lfm2-hybrid-default`)."""
    config = HERE.parents[0] / "engine" / "configs" / "lfm2-hybrid"
    args = ["--max-model-len", "1024", "--kv-cache-memory-bytes", "67108864", "--block-size", "128"]
    code = main(
        ["plan", "--engine-version", "0.32.0", "--json", "--", "vllm", "serve", str(config), *args,
         "--no-async-scheduling", "--mamba-ssm-cache-dtype", "float32"]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    d = json.loads(out.out)
    # conv state 256 × 2 × 2 B = 1,024 B; attention 2 KV heads × 64 × 2 × 2 B = 512 B per token, block 128 →
    # 65,536 B pages (padding 6300 %); groups of 2 → 131,072 B per block; 64 MiB / 131,072 = 512 blocks; per
    # request cdiv(1024, 128) = 8 + 2 state blocks ('align') = 10: 51.2x, 52,428 tokens
    assert (d["block_size"], d["num_blocks"], d["kv_tokens"], d["max_concurrency"]) == (128, 512, 52_428, 51.2)
    assert d["hybrid"]["mamba_page_padding_pct"] == 6300.0


def test_bad_layer_types() -> None:
    with pytest.raises(BadInputError, match="'conv' / 'full_attention'"):
        spec_from_config({**lfm2_config(), "layer_types": ["conv"] * 3}, where="config.json", name="lfm2")
