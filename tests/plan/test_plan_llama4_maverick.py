"""Llama-4-Maverick bundled: MoE in every second layer as vLLM places it, KV worked by hand from the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vramctl.cli.main import main
from vramctl.core.params import is_moe_layer, param_count_from_spec
from vramctl.registry import load_model

ROOT = Path(__file__).resolve().parents[2]
TEXT = yaml.safe_load((ROOT / "profiles" / "models" / "llama-4-maverick-17b-128e-instruct.yaml").read_text())[
    "config"
]["text_config"]


def test_profile_round_trip_and_moe_placement() -> None:
    spec = load_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert load_model("llama-4-maverick") == spec
    assert spec.param_count == param_count_from_spec(spec)
    step = TEXT["interleave_moe_layer_step"]
    # vLLM llama4.py: a layer is MoE when (layer_idx + 1) % interleave_moe_layer_step == 0
    assert [i for i in range(TEXT["num_hidden_layers"]) if is_moe_layer(spec, i)] == [
        i for i in range(TEXT["num_hidden_layers"]) if (i + 1) % step == 0
    ]
    scout = load_model("llama-4-scout")
    assert all(is_moe_layer(scout, i) for i in range(scout.num_hidden_layers))


def test_plan_tp8_h200(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "llama-4-maverick", "--gpu", "h200", "-tp", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    tp = 8
    per_token = (
        TEXT["num_hidden_layers"] * max(1, TEXT["num_key_value_heads"] // tp) * TEXT["head_dim"] * 2 * 2
    )
    assert out["kv_bytes_per_token"] == per_token == 24_576
    assert out["max_model_len"] == TEXT["max_position_embeddings"]  # rope_scaling null: no extension
    assert out["kv_tokens"] == out["num_blocks"] * out["block_size"]
    assert sum(term["bytes"] for term in out["terms"].values()) == out["capacity_bytes"]
