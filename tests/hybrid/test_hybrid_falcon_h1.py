"""Falcon-H1 (`falcon_h1`): attention and a Mamba2 mixer side by side in every decoder layer.

Expected numbers are worked by hand from the config (tests/hybrid/configs/falcon-h1-7b-instruct: Falcon-H1-7B's
published shape) and vLLM 0.32.0's formulas: vllm/model_executor/models/falcon_h1.py registers each layer's SSM
branch as layer num_hidden_layers + i (44 attention + 44 Mamba2 layers); `get_mamba_state_shape_from_config` →
`MambaStateShapeCalculator.mamba2_state_shape` with intermediate = mamba_d_ssm: conv ((3072 + 2 × 1 × 256) / tp,
3), SSM (24 / tp, 128, 256), both in the model dtype (bf16) under `auto`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core import kv
from vramctl.core.specs import FULL_ATTENTION, MAMBA
from vramctl.registry import load_model
from vramctl.registry.models import spec_from_config

HERE = Path(__file__).parent
FALCON = HERE / "configs" / "falcon-h1-7b-instruct"

TRANSFORMERS_META_PARAMS = 7_585_513_568
"""sum(p.numel()) of transformers 5.19's FalconH1ForCausalLM built on the meta device from this config (the Hub
lists Falcon-H1-7B-Instruct at 7.59B)."""
VARIANT_META_PARAMS = 1_334_670_912
"""The same, for `variant()`: 6 layers, mamba_rms_norm / mamba_proj_bias / projectors_bias / attention_bias /
mlp_bias on, mamba_d_head 'auto', 2 groups, tied embeddings."""


def falcon_config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FALCON / "config.json").read_text())
    return data


def variant() -> dict[str, Any]:
    cfg = falcon_config()
    cfg.update(
        mamba_rms_norm=True,
        mamba_proj_bias=True,
        projectors_bias=True,
        mamba_d_head="auto",
        mamba_n_groups=2,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=True,
        num_hidden_layers=6,
    )
    return cfg


def test_every_layer_is_attention_and_mamba() -> None:
    spec = load_model(str(FALCON))
    assert spec.layer_types == (FULL_ATTENTION, MAMBA) * 44
    assert (spec.num_full_layers, spec.num_state_layers) == (44, 44)
    layout = kv.stage_layout(spec.layer_types)
    # two equal buckets of 44: one attention group and one state group of 44 layers
    assert layout.group_size == 44 and len(layout.groups) == 2


def test_pipeline_stages_keep_each_layer_whole() -> None:
    spec = load_model(str(FALCON))
    stages = kv.stage_layer_kinds(spec, 3)  # 44 layers over 3 stages: 15, 15, 14 (vLLM get_pp_indices)
    assert [len(s) // 2 for s in stages] == list(kv.pp_partition(44, 3))
    assert all(s.count(FULL_ATTENTION) == s.count(MAMBA) for s in stages)


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [(falcon_config(), TRANSFORMERS_META_PARAMS), (variant(), VARIANT_META_PARAMS)],
    ids=["7b", "variant"],
)
def test_parameters_match_transformers_on_the_meta_device(cfg: dict[str, Any], expected: int) -> None:
    assert spec_from_config(cfg, where="config.json", name="falcon").param_count == expected


def test_mamba_d_head_auto() -> None:
    st = spec_from_config(variant(), where="config.json", name="falcon").state_space
    assert st is not None and (st.num_heads, st.head_dim, st.n_groups) == (24, 128, 2)


@pytest.mark.parametrize(
    ("tp", "conv", "ssm"),
    [
        (1, (3584, 3), (24, 128, 256)),
        # one group, 2 ranks: extra_groups_for_head_shards replicates it, (3072 + 2 × 2 × 256) / 2 = 2048
        (2, (2048, 3), (12, 128, 256)),
    ],
)
def test_state_bytes_per_layer(tp: int, conv: tuple[int, int], ssm: tuple[int, int, int]) -> None:
    shapes = kv.state_shapes(load_model(str(FALCON)), tp=tp)
    assert (shapes.conv, shapes.ssm) == (conv, ssm)
    assert shapes.page_bytes == (conv[0] * conv[1] + ssm[0] * ssm[1] * ssm[2]) * 2


def test_plan_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "plan",
            str(FALCON),
            "--engine-version",  # the worked numbers: 0.33's default block (16) and hybrid alignment
            "0.33.0",
            "--gpu",
            "H100",
            "--max-model-len",
            "32768",
            "--kv-cache-memory-bytes",
            "16GiB",
            # 243 blocks: the default max_num_seqs (1024) would stop vLLM ≥ 0.23 at CUDA-graph set-up (one Mamba
            # block per decode sequence; test_pure_mamba.py)
            "--max-num-seqs",
            "128",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    h = json.loads(out.out)["hybrid"]
    # mamba page 3584 × 3 × 2 + 24 × 128 × 256 × 2 = 1,594,368 B; attention 2 × 128 × 2 × 2 = 1,024 B per token
    # block 16 × cdiv(1,594,368, 16 × 1,024) = 1,568 tokens; page 1,605,632 B (0.71 % padding)
    assert (h["state_page_bytes"], h["attention_token_bytes"]) == (1_594_368, 1_024)
    assert (h["attention_block_size"], h["mamba_page_padding_pct"]) == (1568, 0.71)
    assert (h["group_size"], h["attention_groups"], h["state_groups"]) == (44, 1, 1)
    assert h["num_blocks"] == 16 * 2**30 // (44 * 1568 * 1024)
    # cdiv(32768, 1568) = 21 attention blocks + 3 state blocks: 'align' (prefix caching on by default) keeps 2,
    # and vLLM 0.32's Mamba2 layers add num_prefill_checkpoint_blocks = 1
    assert (h["attention_blocks_per_request"], h["state_blocks_per_request"]) == (21, 3)
    assert h["state_bytes_per_request"] == 44 * 1_594_368 * 3


@pytest.mark.parametrize(
    ("flags", "state_blocks"),
    [
        (["--engine-version", "0.32.0"], 3),
        (["--engine-version", "0.31.0"], 2),  # before the release read: the plain 'align' two
        (["--engine-version", "0.27.0"], 1),  # prefix caching off for hybrids by default: mode 'none'
    ],
)
def test_state_blocks_by_version(capsys: pytest.CaptureFixture[str], flags: list[str], state_blocks: int) -> None:
    code = main(["plan", str(FALCON), "--gpu", "H100", "--max-model-len", "32768", *flags, "--json"])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    assert json.loads(out.out)["hybrid"]["state_blocks_per_request"] == state_blocks


def test_engine_case_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny Falcon-H1 of tests/engine/configs/falcon-h1-hybrid as vLLM 0.32.0's CPU build ran it (128 blocks
    of 256 tokens, 18,724 tokens, 18.29x; tests/engine/cases.yaml `falcon-h1-hybrid-default`)."""
    config = HERE.parents[0] / "engine" / "configs" / "falcon-h1-hybrid"
    args = ["--max-model-len", "1024", "--kv-cache-memory-bytes", "67108864", "--block-size", "256"]
    code = main(
        ["plan", "--engine-version", "0.32.0", "--json", "--", "vllm", "serve", str(config), *args,
         "--no-async-scheduling", "--mamba-ssm-cache-dtype", "float32"]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    d = json.loads(out.out)
    # attention 2 KV heads × 64 × 2 × 2 B = 512 B per token; the engine's block of 256 gives a 131,072 B page
    # ≥ the mamba page (384 × 3 × 2 B + 8 × 32 × 64 × 4 B = 67,840 B); groups of 4 layers → 524,288 B per block;
    # 64 MiB / 524,288 = 128 blocks; per request cdiv(1024, 256) = 4 + 3 state blocks = 7: 128 / 7 = 18.2857x,
    # int(18.2857 × 1024) = 18,724
    assert (d["block_size"], d["num_blocks"], d["kv_tokens"]) == (256, 128, 18_724)
    assert d["max_concurrency"] == 18.2857
