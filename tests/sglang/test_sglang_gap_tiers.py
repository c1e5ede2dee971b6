"""explain_gap, the utilisation trade and the host tier (seed numbers)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.core.engines.sglang import GapItem, explain_gap, plan_sglang
from vramctl.core.errors import BadInputError
from vramctl.core.host_tier import plan_hicache, plan_host_tier, plan_vllm_offload
from vramctl.core.plan import plan_vllm
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GB, GiB
from vramctl.core.utilization import DEFAULT_UTILIZATIONS, utilization_for_kv, utilization_trade
from vramctl.registry import load_gpu, load_model

LLAMA = load_model("llama-3-8b")
H100 = load_gpu("h100-sxm")
SEED_TOKENS = 445_632
CELL = 131_072


# --- explain_gap --------------------------------------------------------------------------------------------
def test_gap_items_sum_to_the_kv_difference() -> None:
    vllm = plan_vllm(LLAMA, H100, ServeSettings(max_model_len=8192, max_num_batched_tokens=8192))
    sglang = plan_sglang(LLAMA, H100, ServeSettings(engine="both"))
    items = explain_gap(vllm, sglang)
    assert sum(i.bytes for i in items) == vllm.kv_cache_bytes - sglang.kv_cache_bytes
    names = {i.name for i in items}
    assert {
        "activation_peak",
        "vllm_headroom",
        "sglang_metadata",
        "sglang_parallel",
        "sglang_fraction_base",
    } <= names
    base = next(i for i in items if i.name == "sglang_fraction_base")
    assert "81559 MiB nvidia-smi total" in base.sentence
    act = next(i for i in items if i.name == "activation_peak")
    assert "1.5 MiB × 8192 tokens" in act.sentence and act.bytes > 0
    assert all(isinstance(i, GapItem) and i.sentence for i in items)
    assert [abs(i.bytes) for i in items] == sorted((abs(i.bytes) for i in items), reverse=True)


def test_gap_shows_the_10_gib_floor_and_a_given_fraction() -> None:
    vllm = plan_vllm(LLAMA, H100, ServeSettings(max_model_len=8192, max_num_batched_tokens=8192))
    floored = plan_sglang(LLAMA, H100, ServeSettings(engine="both", chunked_prefill_size=2048))
    items = {i.name: i for i in explain_gap(vllm, floored)}
    assert items["sglang_floor"].bytes == int(floored.reserve.floor_extra_mib * 2**20)  # type: ignore[union-attr]
    assert sum(i.bytes for i in items.values()) == vllm.kv_cache_bytes - floored.kv_cache_bytes
    given = plan_sglang(LLAMA, H100, ServeSettings(engine="both", mem_fraction_static=0.9, page_size=64))
    items_given = explain_gap(vllm, given)
    assert sum(i.bytes for i in items_given) == vllm.kv_cache_bytes - given.kv_cache_bytes


def test_gap_without_a_ledger_is_one_item() -> None:
    class Bare:
        kv_cache_bytes = 50 * GiB

    sglang = plan_sglang(LLAMA, H100, ServeSettings(engine="sglang"))
    (item,) = explain_gap(Bare(), sglang)
    assert item.bytes == 50 * GiB - sglang.kv_cache_bytes


# --- utilisation trade ---------------------------------------------------------------------------------------
SEED_TOTAL = int(79.6 * GiB)
SEED_NON_KV = math.ceil(SEED_TOTAL * 0.92) - int(54.4 * GiB)


def test_seed_trade_092_to_098() -> None:
    """Seed: at 0.92 6.4 GiB held back, at 0.98 1.6 GiB, buying 4.8 GiB of KV (a 9 % larger pool)."""
    rows = {
        r.utilization: r
        for r in utilization_trade(SEED_TOTAL, SEED_NON_KV, 2 * 1024 * 1024, 512, 8192, (), current=0.92)
    }
    assert set(DEFAULT_UTILIZATIONS) <= set(rows)
    assert rows[0.92].held_back_bytes / GiB == pytest.approx(6.4, abs=0.05)
    assert rows[0.98].held_back_bytes / GiB == pytest.approx(1.6, abs=0.05)
    assert rows[0.98].delta_kv_bytes / GiB == pytest.approx(4.8, abs=0.05)
    assert rows[0.98].kv_bytes / rows[0.92].kv_bytes == pytest.approx(1.088, abs=0.005)
    assert rows[0.92].num_blocks == 27852 and rows[0.92].current
    assert rows[0.98].risk == "thin" and "cuda-graph-capture-oom" in rows[0.98].note
    assert rows[0.92].risk == "ok"
    assert rows[0.96].risk == "tight"


def test_trade_user_value_and_no_kv() -> None:
    rows = utilization_trade(SEED_TOTAL, SEED_NON_KV, 2 << 20, 512, 8192, (0.2,))
    low = next(r for r in rows if r.utilization == 0.2)
    assert low.num_blocks == 0 and low.risk == "no-kv"
    with pytest.raises(BadInputError, match="gpu-memory-utilization"):
        utilization_trade(SEED_TOTAL, SEED_NON_KV, 2 << 20, 512, 8192, (1.5,))
    with pytest.raises(BadInputError):
        utilization_trade(SEED_TOTAL, SEED_NON_KV, 0, 512, 8192)


def test_utilization_for_kv() -> None:
    u = utilization_for_kv(SEED_TOTAL, SEED_NON_KV, int(54.4 * GiB))
    assert u == pytest.approx(0.92, abs=0.001)
    assert math.ceil(SEED_TOTAL * u) - SEED_NON_KV >= int(54.4 * GiB)


@settings(max_examples=100, deadline=None)
@given(
    total=st.integers(min_value=8 * GiB, max_value=200 * GiB),
    frac=st.floats(min_value=0.05, max_value=0.9),
    users=st.lists(st.floats(min_value=0.01, max_value=1.0), max_size=3),
)
def test_trade_more_utilisation_never_fewer_blocks(total: int, frac: float, users: list[float]) -> None:
    rows = utilization_trade(total, int(total * frac), 2 << 20, 512, 8192, users)
    for a, b in itertools.pairwise(rows):
        assert b.num_blocks >= a.num_blocks and b.held_back_bytes <= a.held_back_bytes
    for r in rows:
        assert r.requested_bytes + r.held_back_bytes == total


# --- host tier ----------------------------------------------------------------------------------------------
def test_seed_hicache_example() -> None:
    """Seed: 445,632 device tokens, ratio 2.0 → 891,264 host tokens = about 109 GiB of pinned host RAM."""
    s = ServeSettings(
        engine="sglang", engine_version="0.5.18", enable_hierarchical_cache=True, host_memory_bytes=128 * GiB
    )
    plan = plan_host_tier(LLAMA, H100, s, device_kv_tokens=SEED_TOKENS, kv_bytes_per_token=CELL)
    assert plan is not None
    explicit = plan_host_tier(
        LLAMA,
        H100,
        ServeSettings(engine="sglang", hicache_ratio=2.0, host_memory_bytes=128 * GiB),
        device_kv_tokens=SEED_TOKENS,
        kv_bytes_per_token=CELL,
    )
    assert explicit is not None and explicit.host_tokens == 891_264
    assert plan.host_tokens == 891_264
    assert plan.host_pool_tokens == 891_265  # SGLang adds one padding page
    assert round(plan.pinned_bytes_total / GiB, 1) == 108.8
    assert plan.log_line == "Allocating kv hierarchical KV host pool: 891265 tokens, 116.82 GB host memory."
    assert plan.status == "warning" and "85%" in plan.message


def test_hicache_auto_sizing_0_5_23() -> None:
    """0.5.23 without a ratio or size: ratio = min(2.0, 0.8 × RAM per rank × 0.95 / device KV bytes)."""
    s = ServeSettings(engine="sglang", enable_hierarchical_cache=True, host_memory_bytes=128 * GiB)
    plan = plan_host_tier(LLAMA, H100, s, device_kv_tokens=SEED_TOKENS, kv_bytes_per_token=CELL)
    assert plan is not None
    expected = 0.8 * 128 * GiB * 0.95 / (SEED_TOKENS * CELL)
    assert plan.ratio_to_device == pytest.approx(expected) and plan.host_tokens == int(SEED_TOKENS * expected)
    assert any(n.startswith("HiCache auto-sizing: ratio 2.000 -> 1.788;") for n in plan.notes)
    big_host = plan_host_tier(
        LLAMA,
        H100,
        s.with_changes(host_memory_bytes=1024 * GiB),
        device_kv_tokens=SEED_TOKENS,
        kv_bytes_per_token=CELL,
    )
    assert big_host is not None and big_host.ratio_to_device == 2.0  # the default caps it


def test_hicache_size_is_decimal_gb_per_rank_and_page_aligned() -> None:
    s = ServeSettings(
        engine="sglang", tensor_parallel_size=8, hicache_size_gb=30, host_memory_bytes=2048 * GiB
    )
    plan = plan_hicache(LLAMA, s, device_kv_tokens=SEED_TOKENS, kv_bytes_per_token=CELL // 8, page_size=64)
    assert plan.host_tokens == int(30 * GB // (CELL // 8))
    assert plan.host_pool_tokens == (plan.host_tokens // 64 + 1) * 64
    assert plan.ranks_on_host == 8 and plan.pinned_bytes_total == 8 * plan.pinned_bytes_per_rank
    assert plan.status == "ok"


def test_hicache_fails_above_host_ram_minus_reserve() -> None:
    s = ServeSettings(engine="sglang", hicache_ratio=2.0, host_memory_bytes=64 * GiB, engine_version="0.5.18")
    plan = plan_hicache(LLAMA, s, device_kv_tokens=SEED_TOKENS, kv_bytes_per_token=CELL, version="0.5.18")
    assert plan.status == "fail" and "--hicache-ratio 2" in plan.message
    assert "Not enough host memory available. Requesting 116.82 GB" in plan.message
    small = plan_hicache(
        LLAMA, ServeSettings(hicache_ratio=0.5), device_kv_tokens=SEED_TOKENS, kv_bytes_per_token=CELL
    )
    assert small.status == "unknown" and any("smaller than the device pool" in n for n in small.notes)
    old = plan_hicache(
        LLAMA, ServeSettings(hicache_ratio=2.0), device_kv_tokens=10, kv_bytes_per_token=CELL, version="0.5.9"
    )
    assert old.log_line.startswith("Allocating ") and "for hierarchical KV cache." in old.log_line


def test_vllm_offload_native_total_across_tp() -> None:
    s = ServeSettings(kv_offloading_size_gib=100, tensor_parallel_size=2, host_memory_bytes=256 * GiB)
    plan = plan_vllm_offload(LLAMA, s, device_kv_tokens=SEED_TOKENS, kv_bytes_per_token=CELL // 2)
    assert plan is not None
    per_block_all_ranks = (CELL // 2) * 16 * 2
    assert plan.host_tokens == (100 * GiB // per_block_all_ranks) * 16
    assert plan.pinned_bytes_total <= 100 * GiB and plan.status == "ok"
    assert plan.pinned_bytes_per_rank * 2 == plan.pinned_bytes_total


def test_vllm_offload_mla_shares_one_copy() -> None:
    ds = load_model("deepseek-ai/DeepSeek-V3")
    s = ServeSettings(kv_offloading_size_gib=64, tensor_parallel_size=8)
    plan = plan_vllm_offload(ds, s, device_kv_tokens=100_000, kv_bytes_per_token=70272)
    assert plan is not None
    assert plan.host_tokens == (64 * GiB // (-(-70272 * 16 // 4096) * 4096)) * 16
    assert any("share one copy" in n for n in plan.notes)


def test_vllm_offload_simple_and_lmcache_and_failures() -> None:
    s = ServeSettings(kv_offloading_size_gib=200, tensor_parallel_size=2, host_memory_bytes=128 * GiB)
    simple = plan_vllm_offload(
        LLAMA, s, device_kv_tokens=SEED_TOKENS, kv_bytes_per_token=CELL // 2, simple=True
    )
    assert simple is not None and simple.mechanism == "vllm-simple-offload" and simple.status == "fail"
    assert "--kv-offloading-size 200" in simple.message
    lm = plan_vllm_offload(LLAMA, s, device_kv_tokens=1, kv_bytes_per_token=CELL, backend="lmcache")
    assert lm is not None and lm.status == "unknown"
    assert plan_vllm_offload(LLAMA, ServeSettings(), device_kv_tokens=1, kv_bytes_per_token=CELL) is None
    assert (
        plan_host_tier(
            LLAMA, H100, ServeSettings(engine="sglang"), device_kv_tokens=1, kv_bytes_per_token=CELL
        )
        is None
    )
    with pytest.raises(BadInputError, match="kv-offloading-size"):
        plan_vllm_offload(
            LLAMA, ServeSettings(kv_offloading_size_gib=-1), device_kv_tokens=1, kv_bytes_per_token=CELL
        )
    with pytest.raises(BadInputError, match="hicache-ratio"):
        plan_hicache(LLAMA, ServeSettings(hicache_ratio=0), device_kv_tokens=1, kv_bytes_per_token=CELL)
