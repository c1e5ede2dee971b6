"""DeepSeek-V4 (issue 11): weights and the five-kind KV cache as vLLM 0.32.0 builds them (vramctl/core/dsv4*.py).

Checked three ways: each cache kind's bytes against a hand computation from vLLM's source; the packed groups, bytes
per block and per-request blocks against what vLLM's own `get_kv_cache_groups` returns for the same specs
(tests/fixtures/dsv4/kv_audit.json, written by scripts/dsv4_kv_audit.py with vLLM 0.32.0 on the CPU); the parameter
count against the model card (284 B) and transformers 5.19's count of its default config (the arch-audit fixture).

The V4-Flash config below is synthesised from the published V4-Flash-Base config.json that alibaba/rtp-llm inlines
in its DeepSeek-V4 config test (`FLASH_BASE_CONFIG`: every shape field and `compress_ratios`), with the instruct
checkpoint's quantisation as vLLM documents it (vllm/models/deepseek_v4/quant_config.py:27-45: block-FP8 linears
with UE8M0 scales, `expert_dtype: fp4` MXFP4 experts; the same fields in deepseek-ai's inference README).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core import kv as kvmath
from vramctl.core.dsv4 import Dsv4Shape, parameter_count, parameter_terms, weight_bytes
from vramctl.core.dsv4_cache import dsv4_cache, kv_tokens
from vramctl.core.errors import BadInputError
from vramctl.registry.models import spec_from_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AUDIT = json.loads((FIXTURES / "dsv4" / "kv_audit.json").read_text())

FLASH_RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]  # 43 layers + the MTP layer's entry
FLASH: dict[str, Any] = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": 4096,
    "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512,
    "qk_rope_head_dim": 64, "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8, "index_n_heads": 64,
    "index_head_dim": 128, "index_topk": 512, "sliding_window": 128, "hc_mult": 4, "hc_sinkhorn_iters": 20,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6, "moe_intermediate_size": 2048,
    "num_hash_layers": 3, "num_nextn_predict_layers": 1, "vocab_size": 129280, "max_position_embeddings": 1048576,
    "topk_method": "noaux_tc", "scoring_func": "sqrtsoftplus", "torch_dtype": "bfloat16",
    "rope_scaling": {"type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                     "original_max_position_embeddings": 65536},
    "expert_dtype": "fp4",
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "compress_ratios": FLASH_RATIOS,
}
PUBLISHED_FLASH_PARAMS = 284_000_000_000  # model card: "284B total parameters (13B activated)"


def flash_spec(**changes: Any) -> Any:
    cfg = copy.deepcopy(FLASH)
    cfg.update(changes)
    return spec_from_config(cfg, where="config.json", name="deepseek-ai/DeepSeek-V4-Flash")


def shape_of(ratios: list[int]) -> Dsv4Shape:
    spec = flash_spec(compress_ratios=ratios, num_hidden_layers=len(ratios))
    assert spec.dsv4 is not None
    return spec.dsv4


# --- KV cache: hand computation per cache kind --------------------------------------------------------------------


def test_bytes_per_token_per_cache_kind_by_hand() -> None:
    """vLLM 0.32.0, fp8_ds_mla: a C4A latent is 584 B per 4 tokens (attention.py:856-879: 448 NoPE + 128 RoPE + 8
    scale bytes, tokens_per_state 4), a C128A latent 584 B per 128 tokens, the fp8 indexer key 128 + 4 B per 4 tokens
    (attention.py:1012-1015); V4-Flash has 21 C4A and 20 C128A layers."""
    cache = dsv4_cache(flash_spec().dsv4)
    by_kind = cache.per_token_by_kind()
    assert by_kind == {"c4a": 21 * 584 / 4, "c128a": 20 * 584 / 128, "indexer_k": 21 * 132 / 4}
    assert sum(by_kind.values()) == 3850.25
    # pages of one block (256 tokens), each rounded up to 576 B (kv_cache_interface.py:676-683)
    pages = {layer.name: layer.page_bytes for layer in cache.layers if layer.name.startswith(("layers.2.", "layers.3."))}
    assert pages == {
        "layers.2.attn.indexer.k_cache": 8640,  # 64 states × 132 = 8,448 → 15 × 576
        "layers.2.attn.indexer.compressor.state_cache": 8640,  # 4 tokens × 2·2·128 f32 = 8,192 → 15 × 576
        "layers.2.attn.swa_cache": 37440,  # 64 tokens × 584 = 37,376 → 65 × 576
        "layers.2.attn": 37440,  # 64 states × 584
        "layers.2.attn.compressor.state_cache": 32832,  # 4 tokens × 2·2·512 f32 = 32,768 → 57 × 576
        "layers.3.attn.swa_cache": 37440,
        "layers.3.attn": 1728,  # 2 states × 584 = 1,168 → 3 × 576
        "layers.3.attn.compressor.state_cache": 32832,  # 8 tokens × 2·1·512 f32
    }
    assert {name.replace("model.", ""): page for name, page in AUDIT["cases"]["flash"]["pages"].items()} == pages
    assert cache.bytes_per_token() == 3915  # 1,002,240 B per 256-token block


@pytest.mark.parametrize("case", sorted(AUDIT["cases"]))
def test_packed_pool_matches_vllms_own_grouping(case: str) -> None:
    """vLLM's `get_kv_cache_groups` / `_get_kv_cache_bytes_per_block` / `max_memory_usage_pages` on the same specs
    (scripts/dsv4_kv_audit.py, vLLM 0.32.0): the same groups, bytes per block and blocks per request."""
    want = AUDIT["cases"][case]
    cache = dsv4_cache(shape_of([r if r > 1 else 0 for r in want["compress_ratios"]]), block_size=want["block_size"])
    got_groups = [
        {"layers": len(g.layers), "block_size": g.layers[0].block_size, "page_bytes": g.page_bytes,
         "first": "model." + g.layers[0].name}
        for g in cache.groups
    ]
    assert got_groups == want["groups"]
    assert cache.bytes_per_block == want["bytes_per_block"]
    for row in want["requests"]:
        blocks = [g.blocks_per_request(row["max_model_len"], row["in_flight_tokens"]) for g in cache.groups]
        assert blocks == row["group_blocks"]
        assert cache.request_bytes(row["max_model_len"], row["in_flight_tokens"]) == row["request_bytes"]


def test_kv_tokens_is_vllms_concurrency_times_length() -> None:
    """Also what `watch` and the measuring code read (`kvmath.bytes_per_block` / `kv_bytes_per_token`)."""
    spec = flash_spec()
    assert kvmath.bytes_per_block(spec, block_size=256) == 1_002_240
    assert kvmath.kv_bytes_per_token(spec) == 3915
    cache = dsv4_cache(spec.dsv4)
    assert cache.blocks_per_request(1048576, 16384) == 10778
    assert kv_tokens(cache, 52921, 1048576, 16384) == int(52921 / 10778 * 1048576)


# --- weights ------------------------------------------------------------------------------------------------------


def test_flash_parameter_count_within_1pct_of_the_model_card() -> None:
    spec = flash_spec()
    assert spec.param_count == parameter_count(spec.dsv4) == 284_334_567_511
    assert abs(spec.param_count - PUBLISHED_FLASH_PARAMS) / PUBLISHED_FLASH_PARAMS < 0.01
    terms = parameter_terms(spec.dsv4)
    assert terms["routed_experts"] == 43 * 256 * 3 * 4096 * 2048
    assert terms["hash_tables"] == 3 * 129280 * 6  # tid2eid, an int32 Parameter in vLLM (nvidia/model.py:748)


def test_transformers_default_config_counts_exactly() -> None:
    """transformers 5.19's DeepseekV4ForCausalLM on its default config (the arch-audit fixture) counts
    284,325,869,015; vLLM adds the three hash-routing tables (a buffer in transformers), nothing else."""
    fixture = json.loads((FIXTURES / "arch_audit" / "DeepseekV4ForCausalLM.json").read_text())
    spec = spec_from_config(fixture["config"], where="fixture", name="DeepseekV4ForCausalLM")
    assert spec.param_count - 3 * 129280 * 6 == fixture["transformers_params"] == 284_325_869_015


def test_flash_weight_bytes_fp4_experts_fp8_rest() -> None:
    """MXFP4 experts (½ B + a UE8M0 byte per 32) and block-FP8 linears (1 B + a byte per 128 × 128 block):
    156.0 GB for V4-Flash's decoder; the fp8-expert Base checkpoint (float32 scales) stores 1 B instead of 17/32 B
    per expert weight, a 16-bit one 2 B per parameter."""
    spec = flash_spec()
    assert spec.weight_bytes == weight_bytes(spec.dsv4) == 156_006_389_980
    base = flash_spec(expert_dtype="fp8")
    experts = 43 * 256 * 3 * 4096 * 2048
    assert 0.468 < (base.weight_bytes - spec.weight_bytes) / experts < 0.470  # 1 − 17/32
    plain = flash_spec(quantization_config=None)
    assert plain.weight_bytes > 2 * spec.param_count * 0.99


# --- the plan -----------------------------------------------------------------------------------------------------


def _folder(tmp_path: Path, cfg: dict[str, Any]) -> str:
    folder = tmp_path / "dsv4"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any] | None, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip().startswith("{") else None), err


def test_plan_flash_on_two_h200(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, FLASH)
    code, data, err = _plan(
        capsys, "--model", folder, "--gpu", "h200", "--tensor-parallel-size", "2", "--engine-version", "0.32.0",
        "--json",
    )
    assert code == 0 and data is not None, err
    assert data["block_size"] == 256
    assert data["bytes_per_block"] == 1_002_240
    assert data["blocks_per_request"] == 10_778  # at max_model_len 1,048,576 with 2 × 8,192 tokens in flight
    assert data["kv_bytes_per_token"] == 3915
    assert data["kv_tokens"] == int(data["num_blocks"] / 10_778 * 1_048_576)
    assert any("DeepSeek-V4: KV pool packed from five caches" in note for note in data["explanations"])
    assert "DSA indexer top-k buffer 16 MiB" in data["terms"]["weights"]["formula"]  # 8,192 × 512 int32
    # docs/hybrid.md states this plan's blocks (after the top-k buffer was booked with the weights: 17 blocks fewer)
    hybrid_md = (Path(__file__).resolve().parents[2] / "docs" / "hybrid.md").read_text()
    assert f"and {data['num_blocks']:,} blocks: {data['num_blocks'] / 10_778:.1f} requests of 1M tokens" in hybrid_md


def test_kv_tokens_on_0_20_0_count_the_packed_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before 0.20.1 vLLM logs num_blocks // len(kv_cache_groups) × block_size (`VllmRules.tokens_from_concurrency`):
    DeepSeek-V4's groups are its packed ones, not one group of the plain layout (review of session 9: 0.20.0 printed
    2.6 × the tokens of 0.20.1 for the same pool)."""
    folder = _folder(tmp_path, FLASH)
    code, data, err = _plan(
        capsys, "--model", folder, "--gpu", "h200", "--tensor-parallel-size", "2", "--engine-version", "0.20.0",
        "--json",
    )
    assert code == 0 and data is not None, err
    groups = len(dsv4_cache(flash_spec().dsv4).groups)
    assert groups > 1
    assert data["kv_tokens"] == data["num_blocks"] // groups * 256


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--gpu", "h200", "--engine-version", "0.19.0"), "vLLM serves from 0.20.0"),
        (("--gpu", "a100"), "FlashMLA sparse backend"),
        (("--gpu", "h200", "--kv-cache-dtype", "bfloat16"), "needs an fp8 KV cache"),
        (("--gpu", "h200", "--engine-version", "0.32.0", "--block-size", "64"), "multiples of 256"),
        (("--gpu", "h200", "--pipeline-parallel-size", "2"), "not modelled per pipeline stage"),
        (("--gpu", "h200", "--engine", "sglang"), "SGLang's DeepSeek-V4 pool is not modelled"),
        (("--gpu", "h200", "--tensor-parallel-size", "16"), "use a TP size that divides both"),
        (("--gpu", "h200", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'),
         "drafter (its own compressed caches and weights) is not modelled"),
    ],
)
def test_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    code, _, err = _plan(capsys, "--model", _folder(tmp_path, FLASH), *args)
    assert code == 2 and needle in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"compress_ratios": None}, "needs 'compress_ratios'"),
        ({"compress_ratios": [2] * 44}, "serves 0/1 (window only), 4 and 128"),
        ({"expert_dtype": "fp6"}, "'fp4' or 'fp8' experts"),
        ({"quantization_config": {"quant_method": "compressed-tensors"}}, "not modelled"),
        ({"o_groups": 7}, "must divide heads × head_dim"),
    ],
)
def test_bad_configs_refused(changes: dict[str, Any], needle: str) -> None:
    with pytest.raises(BadInputError, match=r"config\.json") as info:
        flash_spec(**changes)
    assert needle in str(info.value)
