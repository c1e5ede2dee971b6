"""Kimi-Linear-48B-A3B bundled: the profile is the released config, planned from the bundled name alone.

The KV and state numbers are worked by hand from the config (7 MLA + 20 KDA layers, latent 512 + 64,
KDA 32 heads × 128, conv kernel 4), not copied from vramctl's output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vramctl.cli.main import main
from vramctl.registry import load_model

ROOT = Path(__file__).resolve().parents[2]
CFG = yaml.safe_load((ROOT / "profiles" / "models" / "kimi-linear-48b-a3b-instruct.yaml").read_text())[
    "config"
]
KDA = CFG["linear_attn_config"]


def test_the_bundled_profile_is_the_transcribed_config() -> None:
    bundled = load_model("moonshotai/Kimi-Linear-48B-A3B-Instruct")
    assert load_model("kimi-linear-48b-a3b") == bundled
    from_config = load_model(str(ROOT / "tests" / "hybrid" / "configs" / "kimi-linear-48b-a3b-instruct"))
    assert (bundled.param_count, bundled.weight_bytes) == (from_config.param_count, from_config.weight_bytes)
    assert bundled.layer_types == from_config.layer_types
    assert (bundled.num_full_layers, bundled.num_state_layers) == (
        len(KDA["full_attn_layers"]),
        len(KDA["kda_layers"]),
    )


def test_plan_on_one_h200(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "kimi-linear-48b-a3b", "--gpu", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    mla_layers = len(KDA["full_attn_layers"])
    latent = CFG["kv_lora_rank"] + CFG["qk_rope_head_dim"]
    assert out["kv_bytes_per_token"] == mla_layers * latent * 2  # bf16 latent in the MLA layers only
    heads, head_dim, kernel = KDA["num_heads"], KDA["head_dim"], KDA["short_conv_kernel_size"]
    conv = 3 * heads * head_dim * (kernel - 1) * 2  # q, k, v channels, bf16
    recurrent = heads * head_dim * head_dim * 4  # float32 recurrent state
    h = out["hybrid"]
    assert h["state_page_bytes"] == conv + recurrent == 2_170_880
    # vLLM 0.32's 'align' prefix-caching mode keeps two state blocks per request (docs/hybrid.md)
    assert h["mamba_cache_mode"] == "align"
    assert h["state_bytes_per_request"] == 2 * len(KDA["kda_layers"]) * (conv + recurrent)
    assert out["verdict"] == "fits"
    assert sum(term["bytes"] for term in out["terms"].values()) == out["capacity_bytes"]
