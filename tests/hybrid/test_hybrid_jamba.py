"""Jamba (`jamba`): Mamba1 layers, attention every attn_layer_period-th layer, MoE every expert_layer_period-th.

Expected numbers are worked by hand from the config (tests/hybrid/configs/ai21-jamba-mini-1.5: the Jamba 52B
shape, JambaConfig's defaults) and vLLM 0.32.0's formulas: `JambaForCausalLM.get_mamba_state_shape_from_config`
(vllm/model_executor/models/jamba.py) → `MambaStateShapeCalculator.mamba1_state_shape`: conv (mamba_expand ×
hidden / tp, d_conv − 1), SSM (mamba_expand × hidden / tp, d_state), both in the model dtype under `auto`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core import kv
from vramctl.core.errors import BadInputError
from vramctl.core.params import is_moe_layer, num_moe_layers
from vramctl.core.specs import FULL_ATTENTION
from vramctl.registry import load_model
from vramctl.registry.models import spec_from_config

HERE = Path(__file__).parent
JAMBA = HERE / "configs" / "ai21-jamba-mini-1.5"

TRANSFORMERS_META_PARAMS = 51_570_323_328
"""sum(p.numel()) of transformers 5.19's JambaForCausalLM built on the meta device from this config."""
VARIANT_META_PARAMS = 2_887_619_712
"""The same for `variant()`: 6 layers, attention at i % 3 == 2, 4 experts at i % 3 == 0, mamba_proj_bias on,
no conv bias, dt_rank 'auto', tied embeddings."""


def jamba_config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((JAMBA / "config.json").read_text())
    return data


def variant() -> dict[str, Any]:
    cfg = jamba_config()
    cfg.update(
        mamba_proj_bias=True,
        mamba_conv_bias=False,
        mamba_dt_rank="auto",
        num_hidden_layers=6,
        attn_layer_period=3,
        attn_layer_offset=2,
        expert_layer_period=3,
        expert_layer_offset=0,
        num_experts=4,
        tie_word_embeddings=True,
    )
    return cfg


def test_layer_and_expert_pattern() -> None:
    spec = load_model(str(JAMBA))
    assert [i for i, k in enumerate(spec.layer_types) if k == FULL_ATTENTION] == [4, 12, 20, 28]
    assert (spec.num_full_layers, spec.num_state_layers) == (4, 28)
    assert [i for i in range(32) if is_moe_layer(spec, i)] == list(range(1, 32, 2))
    assert num_moe_layers(spec) == 16


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [(jamba_config(), TRANSFORMERS_META_PARAMS), (variant(), VARIANT_META_PARAMS)],
    ids=["52b", "variant"],
)
def test_parameters_match_transformers_on_the_meta_device(cfg: dict[str, Any], expected: int) -> None:
    assert spec_from_config(cfg, where="config.json", name="jamba").param_count == expected


@pytest.mark.parametrize(("tp", "width"), [(1, 8192), (2, 4096), (8, 1024)])
def test_mamba1_state_bytes_per_layer(tp: int, width: int) -> None:
    shapes = kv.state_shapes(load_model(str(JAMBA)), tp=tp)
    assert (shapes.conv, shapes.ssm) == ((width, 3), (width, 16))
    assert shapes.page_bytes == (width * 3 + width * 16) * 2


def test_plan_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--engine-version", "0.33.0", "--gpu", "H100", "-tp", "2", "--max-model-len", "65536", "--kv-cache-memory-bytes", "20GiB"]
    code = main(["plan", str(JAMBA), *args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    h = json.loads(out.out)["hybrid"]
    assert h["state_kind"] == "mamba1" and h["ssm_state_shape"] == [4096, 16]
    # mamba page (4096 × 3 + 4096 × 16) × 2 = 155,648 B; attention 4 KV heads × 128 × 2 × 2 = 2,048 B per token:
    # block 16 × cdiv(155,648, 16 × 2,048) = 80 tokens, page 163,840 B (5.26 % padding)
    assert (h["state_page_bytes"], h["attention_token_bytes"], h["attention_block_size"]) == (155_648, 2048, 80)
    assert h["mamba_page_padding_pct"] == 5.26
    # 4 attention + 28 Mamba1 layers: groups of 4, 1 attention + 7 state groups; 20 GiB // (4 × 163,840)
    assert (h["group_size"], h["attention_groups"], h["state_groups"]) == (4, 1, 7)
    assert h["num_blocks"] == 20 * 2**30 // (4 * 163_840)
    # cdiv(65536, 80) = 820 attention blocks + 7 × 2 ('align'; Mamba1 layers add no prefill checkpoint block)
    assert (h["attention_blocks_per_request"], h["state_blocks_per_request"]) == (820, 14)


def test_engine_case_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny Jamba of tests/engine/configs/jamba-hybrid as vLLM 0.32.0's CPU build ran it (512 blocks of 128
    tokens, 52,428 tokens, 51.2x, "Padding mamba page size by 82.86%"; tests/engine/cases.yaml
    `jamba-hybrid-default`)."""
    config = HERE.parents[0] / "engine" / "configs" / "jamba-hybrid"
    args = ["--max-model-len", "1024", "--kv-cache-memory-bytes", "67108864", "--block-size", "128"]
    code = main(
        ["plan", "--engine-version", "0.32.0", "--json", "--", "vllm", "serve", str(config), *args,
         "--no-async-scheduling", "--mamba-ssm-cache-dtype", "float32"]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    d = json.loads(out.out)
    # state (512 × 3) × 2 B + (512 × 16) × 4 B = 35,840 B; attention 2 × 64 × 2 × 2 B = 512 B per token → 65,536 B
    # pages of 128 (82.86 % padding); groups of 2 → 131,072 B per block, 512 blocks; per request 8 + 2 = 10
    assert (d["block_size"], d["num_blocks"], d["kv_tokens"], d["max_concurrency"]) == (128, 512, 52_428, 51.2)
    assert d["hybrid"]["mamba_page_padding_pct"] == 82.86


def test_bad_attention_offset() -> None:
    with pytest.raises(BadInputError, match="attn_layer_offset"):
        spec_from_config({**jamba_config(), "attn_layer_offset": 8}, where="config.json", name="jamba")
