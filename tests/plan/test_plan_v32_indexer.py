"""DeepSeek-V3.2: the sparse-attention indexer's K cache (132 B per token and layer) beside the MLA latent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vramctl.cli.main import main
from vramctl.core import kv
from vramctl.registry import load_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def v32(tmp_path: Path) -> str:
    """DeepSeek-V3's config with V3.2's three indexer fields (what distinguishes the two configs)."""
    config = dict(yaml.safe_load((ROOT / "profiles" / "models" / "deepseek-v3.yaml").read_text())["config"])
    config.update(
        architectures=["DeepseekV32ForCausalLM"],
        model_type="deepseek_v32",
        index_head_dim=128,
        index_n_heads=64,
        index_topk=2048,
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_indexer_bytes_per_token_and_layer(v32: str) -> None:
    spec = load_model(v32)
    assert spec.mla is not None and spec.mla.indexer_bytes_per_token == 128 + 4
    assert load_model("deepseek-v3").mla.indexer_bytes_per_token == 0  # type: ignore[union-attr]
    # bf16 latent 576 × 2 + the indexer, every layer, every rank
    assert kv.kv_bytes_per_token(spec, tp=8) == 61 * (576 * 2 + 132) == 78_324
    # any fp8 KV dtype is V3.2's packed fp8_ds_mla (656 B) + the indexer
    assert kv.kv_bytes_per_token(spec, kv_cache_dtype="fp8", tp=8) == 61 * (656 + 132) == 48_068


def test_plan_counts_it(v32: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", v32, "--gpu", "h200", "-tp", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 78_324
    assert out["bytes_per_block"] == out["block_size"] * 78_324
