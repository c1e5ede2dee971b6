"""KV geometry per attention kind (vramctl.core.kv) against vLLM's formulas (../shared/reference/vllm.md §3)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vramctl.core import kv
from vramctl.core.errors import BadInputError
from vramctl.core.specs import FULL_ATTENTION, SLIDING_ATTENTION, MLASpec, ModelSpec
from vramctl.registry import load_model


def _llama8b() -> ModelSpec:
    return ModelSpec(
        name="test/llama-3-8b",
        architecture="LlamaForCausalLM",
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_position_embeddings=8192,
        torch_dtype="bfloat16",
        param_count=8_030_261_248,
        weight_bytes=16_060_522_496,
    )


def test_llama3_8b_bytes_per_token_and_block() -> None:
    m = _llama8b()
    assert kv.kv_bytes_per_token(m) == 131_072  # 32 × 8 × 128 × 2 × 2
    assert kv.page_size_bytes(m, block_size=16) == 65_536
    assert kv.bytes_per_block(m, block_size=16) == 2_097_152
    assert kv.kv_bytes_per_token(m, kv_cache_dtype="fp8") == 65_536


def test_tp_divides_kv_heads_but_never_below_one() -> None:
    m = _llama8b()
    assert kv.kv_bytes_per_token(m, tp=2) == 65_536
    assert kv.kv_bytes_per_token(m, tp=8) == 16_384
    # 8 KV heads over 16 ranks: one replicated head per rank, not half a head.
    assert kv.kv_heads_per_rank(m, 16) == 1
    assert kv.kv_bytes_per_token(m, tp=16) == 16_384


def test_mla_one_latent_replicated_on_every_rank() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    assert m.mla is not None
    per_layer = (512 + 64) * 2  # no ×2 for K and V
    assert kv.token_bytes_per_layer(m) == per_layer
    assert kv.kv_bytes_per_token(m, tp=8) == 61 * per_layer  # TP does not shard MLA
    assert kv.token_bytes_per_layer(m, kv_cache_dtype="fp8_ds_mla") == 656
    assert kv.token_bytes_per_layer(m, kv_cache_dtype="fp8") == 576


def test_fp8_ds_mla_rejected_for_non_mla() -> None:
    with pytest.raises(BadInputError, match="kv-cache-dtype"):
        kv.token_bytes_per_layer(_llama8b(), kv_cache_dtype="fp8_ds_mla")


def test_unknown_kv_dtype_names_the_flag() -> None:
    with pytest.raises(BadInputError, match="--kv-cache-dtype"):
        kv.kv_dtype_bytes(_llama8b(), "fp7")


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        (32, 4, (8, 8, 8, 8)),
        (61, 4, (15, 15, 16, 15)),
        (22, 4, (5, 6, 6, 5)),
        (5, 3, (2, 2, 1)),
        (61, 2, (31, 30)),
    ],
)
def test_pp_partition_matches_get_pp_indices(layers: int, pp: int, expected: tuple[int, ...]) -> None:
    assert kv.pp_partition(layers, pp) == expected
    assert sum(expected) == layers


def test_pp_largest_stage_binds() -> None:
    m = replace(_llama8b(), num_hidden_layers=61)
    per_layer = kv.page_size_bytes(m, block_size=16)
    assert kv.bytes_per_block(m, block_size=16, pp=4) == 16 * per_layer
    assert kv.kv_bytes_per_token(m, pp=4) == 16 * 8 * 128 * 2 * 2


def test_hybrid_gpt_oss_two_equal_groups() -> None:
    m = load_model("openai/gpt-oss-20b")  # 12 sliding (128) + 12 full
    layout = kv.stage_layout(m.attention_kinds())
    assert layout.group_size == 12
    assert sorted(g.kind for g in layout.groups) == [FULL_ATTENTION, SLIDING_ATTENTION]
    page = kv.page_size_bytes(m, block_size=16)
    assert kv.bytes_per_block(m, block_size=16) == 12 * page
    # One full group (cdiv(8192, 16) = 512) + one window group (cap).
    cap = kv.sliding_window_blocks_per_request(
        window=128, max_model_len=8192, block_size=16, in_flight_tokens=2 * 8192
    )
    assert cap == 8192 // 16 + 1  # the window plus in-flight tokens exceed max_model_len
    assert (
        kv.blocks_per_request(
            m, max_model_len=8192, block_size=16, max_num_batched_tokens=8192, version=(0, 33, 0)
        )
        == 512 + cap
    )


def test_sliding_window_cap_for_long_context() -> None:
    # cdiv(min(window − 1 + in_flight, max_model_len), block) + 1
    assert kv.sliding_window_blocks_per_request(
        window=1024, max_model_len=131072, block_size=16, in_flight_tokens=2048
    ) == (-(-(1024 - 1 + 2048) // 16) + 1)
    # 0.11 used max_num_batched_tokens itself; 0.33 (pp + 1) batches in flight.
    assert kv.max_in_flight_tokens(2048, version=(0, 11, 0)) == 2048
    assert kv.max_in_flight_tokens(2048, version=(0, 33, 0), pp=1) == 4096


def test_gemma3_groups_of_the_smallest_bucket() -> None:
    m = load_model(
        "google/gemma-3-27b-it"
    )  # 52 sliding + 10 full → groups of 10, 6 window groups (8 padding)
    layout = kv.stage_layout(m.attention_kinds())
    assert layout.group_size == 10
    assert sum(1 for g in layout.groups if g.kind == SLIDING_ATTENTION) == 6
    assert sum(g.padding_layers for g in layout.groups) == 8


def test_per_request_bytes_counts_real_layers() -> None:
    m = _llama8b()
    needed = kv.per_request_kv_bytes(
        m, max_model_len=8192, block_size=16, max_num_batched_tokens=8192, version=(0, 33, 0)
    )
    assert needed == 512 * kv.bytes_per_block(m, block_size=16)


def test_mla_model_has_latent_dim() -> None:
    mla = MLASpec(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
    assert mla.latent_dim == 576
