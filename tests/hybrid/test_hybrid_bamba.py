"""Bamba (`bamba`): Mamba2 layers with attention at `attn_layer_indices`; vLLM served it up to 0.23.0.

Expected numbers are worked by hand from the config (tests/hybrid/configs/bamba-9b: ibm-ai-platform/Bamba-9B's
published shape — 32 layers, hidden 4096, 32 heads, mamba_d_state 128, attention at 9, 18, 27 — with the other
fields as BambaConfig's defaults / the checkpoint's) and vLLM's formulas: `BambaForCausalLM.
get_mamba_state_shape_from_config` (vllm/model_executor/models/bamba.py, 0.10.2 – 0.23.0) →
`mamba2_state_shape(intermediate = mamba_expand × hidden_size, ...)`; `_PREVIOUSLY_SUPPORTED_MODELS`
(vllm/model_executor/models/registry.py at v0.32.0): "BambaForCausalLM": "0.23.0".
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
BAMBA = HERE / "configs" / "bamba-9b"

TRANSFORMERS_META_PARAMS = 9_780_235_392
"""sum(p.numel()) of transformers 5.19's BambaForCausalLM built on the meta device from this config."""
VARIANT_META_PARAMS = 1_582_043_648
"""The same for `variant()`: 4 layers (attention at 1), mamba_proj_bias, attention_bias, mamba_d_head 'auto',
2 groups, tied embeddings."""


def bamba_config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BAMBA / "config.json").read_text())
    return data


def variant() -> dict[str, Any]:
    cfg = bamba_config()
    cfg.update(
        mamba_proj_bias=True,
        mamba_d_head="auto",
        mamba_n_groups=2,
        attention_bias=True,
        tie_word_embeddings=True,
        num_hidden_layers=4,
        attn_layer_indices=[1],
    )
    return cfg


def test_attention_at_the_listed_indices() -> None:
    spec = load_model(str(BAMBA))
    assert [i for i, k in enumerate(spec.layer_types) if k == FULL_ATTENTION] == [9, 18, 27]
    assert (spec.num_full_layers, spec.num_state_layers) == (3, 29)


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [(bamba_config(), TRANSFORMERS_META_PARAMS), (variant(), VARIANT_META_PARAMS)],
    ids=["9b", "variant"],
)
def test_parameters_match_transformers_on_the_meta_device(cfg: dict[str, Any], expected: int) -> None:
    assert spec_from_config(cfg, where="config.json", name="bamba").param_count == expected


def test_state_bytes_per_layer() -> None:
    shapes = kv.state_shapes(load_model(str(BAMBA)), tp=2)
    # conv (8192 + 2 × 2 × 128) / 2 = 4352 channels (the one group replicated to 2); SSM (64, 64, 128)
    assert (shapes.conv, shapes.ssm) == ((4352, 3), (64, 64, 128))
    assert shapes.page_bytes == (4352 * 3 + 64 * 64 * 128) * 2


def test_planned_up_to_the_last_release_that_served_it(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", str(BAMBA), "--gpu", "H100", "--engine-version", "0.23.0", "--json"])
    out = capsys.readouterr()
    assert code in (0, 1), out.err
    h = json.loads(out.out)["hybrid"]
    assert (h["full_attention_layers"], h["state_layers"], h["group_size"]) == (3, 29, 3)
    # 0.23 keeps prefix caching off for hybrids: one state block per group, cdiv(29, 3) = 10 state groups
    assert (h["state_groups"], h["state_blocks_per_request"]) == (10, 10)


@pytest.mark.parametrize("version", [None, "0.24.0", "0.32.0"])
def test_refused_after_vllm_dropped_it(capsys: pytest.CaptureFixture[str], version: str | None) -> None:
    flags = ["--engine-version", version] if version else []
    code = main(["plan", str(BAMBA), "--gpu", "H100", *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "BambaForCausalLM was supported in vLLM until v0.23.0" in err and "--engine-version 0.23.0" in err


def test_bad_attention_indices() -> None:
    with pytest.raises(BadInputError, match="attn_layer_indices"):
        spec_from_config({**bamba_config(), "attn_layer_indices": [40]}, where="config.json", name="bamba")
