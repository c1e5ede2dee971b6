"""Zamba2 (`zamba2`): Mamba2 in every layer, a shared attention block beside it in the `hybrid` layers.

Expected numbers are worked by hand from the config (tests/hybrid/configs/zamba2-2.7b: a Zamba2-2.7B-shaped config,
Zamba2Config's defaults for the layer list) and vLLM 0.32.0's formulas: vllm/model_executor/models/zamba2.py gives
every hybrid layer an Attention of its own (num_attention_heads KV heads of 2 × hidden / heads) and every layer a
Mamba2 mixer: `mamba2_state_shape(intermediate = mamba_expand × hidden, mamba_ngroups, n_mamba_heads,
mamba_headdim, mamba_d_state, mamba_d_conv)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core import kv
from vramctl.core.errors import BadInputError
from vramctl.core.specs import FULL_ATTENTION, MAMBA
from vramctl.registry import load_model
from vramctl.registry.models import spec_from_config

HERE = Path(__file__).parent
ZAMBA2 = HERE / "configs" / "zamba2-2.7b"

TRANSFORMERS_META_PARAMS = 2_662_214_560
"""sum(p.numel()) of transformers 5.19's Zamba2ForCausalLM on the meta device from this config (its shared blocks
tied, counted once, as the checkpoint stores them)."""
VARIANT_META_PARAMS = 820_066_048
"""The same for `variant()`: 8 layers with legacy `mamba` names, shared attention adapters, biases, 3 shared
blocks, 2 groups, 40 Mamba heads, intermediate_size 4096. (With untied embeddings transformers also unties the
shared blocks, so that count is not the checkpoint's.)"""


def zamba2_config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ZAMBA2 / "config.json").read_text())
    return data


def variant() -> dict[str, Any]:
    cfg = zamba2_config()
    cfg.update(
        use_shared_attention_adapter=True,
        add_bias_linear=True,
        num_mem_blocks=3,
        mamba_ngroups=2,
        num_hidden_layers=8,
        layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid", "mamba", "hybrid", "mamba"],
        intermediate_size=4096,
        n_mamba_heads=40,
    )
    return cfg


def test_every_layer_has_mamba_and_hybrid_layers_attention() -> None:
    spec = load_model(str(ZAMBA2))
    assert (spec.num_full_layers, spec.num_state_layers) == (9, 54)
    assert spec.layer_types[:8] == (MAMBA,) * 6 + (FULL_ATTENTION, MAMBA)
    # attention over 2 × 2560 = 5120 channels: 32 heads of 160, as many KV heads (vLLM's QKVParallelLinear)
    assert (spec.head_dim, spec.num_key_value_heads, spec.intermediate_size) == (160, 32, 10240)


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [(zamba2_config(), TRANSFORMERS_META_PARAMS), (variant(), VARIANT_META_PARAMS)],
    ids=["2.7b", "variant"],
)
def test_parameters_match_transformers_on_the_meta_device(cfg: dict[str, Any], expected: int) -> None:
    assert spec_from_config(cfg, where="config.json", name="zamba2").param_count == expected


def test_state_bytes_per_layer() -> None:
    shapes = kv.state_shapes(load_model(str(ZAMBA2)), tp=1)
    # conv 5120 + 2 × 64 = 5248 channels × 3; SSM (80, 64, 64)
    assert (shapes.conv, shapes.ssm) == ((5248, 3), (80, 64, 64))
    assert shapes.page_bytes == (5248 * 3 + 80 * 64 * 64) * 2


def test_plan_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    # 242 blocks: below the L4's default max_num_seqs, which vLLM ≥ 0.23 refuses under full CUDA graphs
    args = ["--engine-version", "0.33.0", "--gpu", "L4", "--max-model-len", "4096", "--kv-cache-memory-bytes", "2GiB", "--max-num-seqs", "128"]
    code = main(["plan", str(ZAMBA2), *args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    h = json.loads(out.out)["hybrid"]
    # attention 32 × 160 × 2 × 2 B = 20,480 B per token; mamba page 686,848 B: block 16 × cdiv(686,848, 16 × 20,480)
    # = 48 tokens, page 983,040 B; 9 attention + 54 Mamba2 layers: groups of 9, 1 + 6
    assert (h["attention_token_bytes"], h["state_page_bytes"], h["attention_block_size"]) == (20_480, 686_848, 48)
    assert (h["group_size"], h["attention_groups"], h["state_groups"]) == (9, 1, 6)
    assert h["num_blocks"] == 2 * 2**30 // (9 * 983_040)
    # cdiv(4096, 48) = 86 attention blocks + 6 groups × 3 ('align' + the Mamba2 prefill checkpoint block)
    assert (h["attention_blocks_per_request"], h["state_blocks_per_request"]) == (86, 18)


def test_engine_case_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny Zamba2 of tests/engine/configs/zamba2-hybrid as vLLM 0.32.0's CPU build ran it (128 blocks of 128
    tokens, 9,362 tokens, 9.14x, "Padding mamba page size by 94.31%", kv cache groups of 128 × 3;
    tests/engine/cases.yaml `zamba2-hybrid-default`)."""
    config = HERE.parents[0] / "engine" / "configs" / "zamba2-hybrid"
    args = ["--max-model-len", "1024", "--kv-cache-memory-bytes", "67108864", "--block-size", "128"]
    code = main(
        ["plan", "--engine-version", "0.32.0", "--json", "--", "vllm", "serve", str(config), *args,
         "--no-async-scheduling", "--mamba-ssm-cache-dtype", "float32"]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    d = json.loads(out.out)
    # attention 4 heads × 128 × 2 × 2 B = 2,048 B per token → 262,144 B pages of 128; groups of 2 → 524,288 B per
    # block, 128 blocks; per request cdiv(1024, 128) = 8 + 2 state groups × 3 = 14: 9.1429x, 9,362 tokens
    assert (d["block_size"], d["num_blocks"], d["kv_tokens"], d["max_concurrency"]) == (128, 128, 9_362, 9.1429)
    assert d["hybrid"]["mamba_page_padding_pct"] == 94.31


def test_pipeline_parallelism_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", str(ZAMBA2), "--gpu", "L4", "-pp", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--pipeline-parallel-size 2" in err


def test_bad_block_types() -> None:
    with pytest.raises(BadInputError, match="layers_block_type"):
        spec_from_config({**zamba2_config(), "layers_block_type": ["hybrid"] * 3}, where="config.json", name="z")
