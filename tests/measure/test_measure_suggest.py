"""The --kv-cache-memory suggestion arithmetic (pure): exact numbers, the graph pool counted once, SGLang."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from vramctl.core.suggest import (
    VLLM_REDUNDANCY_BYTES,
    SuggestInput,
    graph_pool_once,
    sglang_fraction_for,
    suggest_kv_cache_memory,
)
from vramctl.core.units import GiB, MiB


def _h100_llama() -> SuggestInput:
    # Llama-3-8B on an H100 (seed chapter numbers): 79.19 GiB total, u = 0.92, weights 14.96 GiB.
    total = 85_031_714_816
    return SuggestInput(
        total_bytes=total,
        init_free_bytes=84_000_000_000,
        requested_bytes=-(-total * 92 // 100),
        gpu_memory_utilization=0.92,
        total_consumed_bytes=16 * GiB,
        transient_peak_bytes=1 * GiB,
        cuda_graph_estimate_bytes=700 * MiB,
        cuda_graph_actual_bytes=500 * MiB,
        estimate_applied=True,
        bytes_per_block=2 * MiB,
        block_size=16,
        blocks_per_request=512,
        max_model_len=8192,
        sglang_pre_load_free_bytes=84_000_000_000,
        sglang_post_load_free_bytes=84_000_000_000 - 16_060_000_000,
        sglang_cell_bytes=131_072,
    )


def test_redundancy_is_vllms_150_mib() -> None:
    assert VLLM_REDUNDANCY_BYTES == 150 * (1 << 20)


def test_exact_numbers_graph_counted_once() -> None:
    inp = _h100_llama()
    out = suggest_kv_cache_memory(inp)
    non_kv = 16 * GiB + 1 * GiB + 500 * MiB  # the actual pool, once
    assert out.non_kv_bytes == non_kv
    assert out.graph_source == "actual"
    assert out.fit_requested.kv_cache_memory_bytes == inp.requested_bytes - non_kv - 150 * MiB
    assert out.fill_gpu.kv_cache_memory_bytes == inp.init_free_bytes - non_kv - 150 * MiB
    assert (
        out.fit_requested.vllm_flag == f"--kv-cache-memory-bytes={inp.requested_bytes - non_kv - 150 * MiB}"
    )
    # vLLM's own log: total_consumed + (transient + applied estimate) + actual → the estimate counted again.
    vllm_non_kv = 16 * GiB + (1 * GiB + 700 * MiB) + 500 * MiB
    assert out.vllm_logged_requested_bytes == inp.requested_bytes - vllm_non_kv - 150 * MiB
    assert out.vllm_logged_gpu_bytes == inp.init_free_bytes - vllm_non_kv - 150 * MiB
    assert out.double_counted_bytes == 700 * MiB


def test_estimate_not_applied_means_no_double_count() -> None:
    inp = replace(_h100_llama(), estimate_applied=False)
    out = suggest_kv_cache_memory(inp)
    assert out.double_counted_bytes == 0
    assert out.vllm_logged_requested_bytes == out.fit_requested.kv_cache_memory_bytes


def test_graph_pool_falls_back_to_estimate_then_none() -> None:
    inp = replace(_h100_llama(), cuda_graph_actual_bytes=0)
    assert graph_pool_once(inp) == (700 * MiB, "estimate")
    out = suggest_kv_cache_memory(inp)
    assert out.non_kv_bytes == 16 * GiB + 1 * GiB + 700 * MiB
    eager = replace(inp, cuda_graph_estimate_bytes=0)
    assert graph_pool_once(eager) == (0, "none")
    assert suggest_kv_cache_memory(eager).non_kv_bytes == 17 * GiB


def test_blocks_tokens_concurrency() -> None:
    out = suggest_kv_cache_memory(_h100_llama())
    s = out.fit_requested
    assert s.num_blocks == s.kv_cache_memory_bytes // (2 * MiB)
    assert s.max_concurrency == round(s.num_blocks / 512, 4)
    assert s.kv_tokens == int(s.num_blocks / 512 * 8192)
    assert s.sglang_max_total_tokens == s.kv_cache_memory_bytes // 131_072


def test_sglang_fraction_reproduces_the_pool() -> None:
    inp = _h100_llama()
    s = suggest_kv_cache_memory(inp).fit_requested
    mfs = s.sglang_mem_fraction_static
    assert mfs is not None
    pre, post = inp.sglang_pre_load_free_bytes, inp.sglang_post_load_free_bytes
    pool = post - pre * (1 - mfs)
    # rounded up to 3 decimals: the pool is at least the suggestion, and within 0.001 × pre of it;
    # --max-total-tokens then pins it to the suggestion.
    assert pool >= s.kv_cache_memory_bytes - 1
    assert pool - s.kv_cache_memory_bytes <= pre * 0.001 + 1
    assert s.sglang_flags == f"--mem-fraction-static={mfs:.3f} --max-total-tokens={s.sglang_max_total_tokens}"


def test_sglang_fraction_out_of_range_is_none() -> None:
    assert sglang_fraction_for(10 * GiB, 0, 5 * GiB) is None
    assert sglang_fraction_for(0, 10 * GiB, 5 * GiB) is None
    # a pool larger than everything free after the load: mfs would be ≥ 1
    assert sglang_fraction_for(20 * GiB, 10 * GiB, 5 * GiB) is None


def test_negative_budget_clamps_to_zero_blocks() -> None:
    inp = replace(_h100_llama(), total_consumed_bytes=90 * GiB)
    out = suggest_kv_cache_memory(inp)
    assert out.fit_requested.kv_cache_memory_bytes == 0
    assert out.fit_requested.num_blocks == 0
    assert out.fill_gpu.num_blocks == 0


@given(
    consumed=st.integers(0, 80 * GiB),
    transient=st.integers(0, 8 * GiB),
    estimate=st.integers(0, 4 * GiB),
    actual=st.integers(0, 4 * GiB),
    applied=st.booleans(),
)
def test_properties(consumed: int, transient: int, estimate: int, actual: int, applied: bool) -> None:
    inp = replace(
        _h100_llama(),
        total_consumed_bytes=consumed,
        transient_peak_bytes=transient,
        cuda_graph_estimate_bytes=estimate,
        cuda_graph_actual_bytes=actual,
        estimate_applied=applied,
    )
    out = suggest_kv_cache_memory(inp)
    # the card-filling size is never below the requested-memory size (init free ≥ requested here)
    assert out.fill_gpu.kv_cache_memory_bytes >= out.fit_requested.kv_cache_memory_bytes
    # with a measured capture, vramctl never suggests less than vLLM's own log (it only removes a double count)
    if actual > 0:
        assert out.fit_requested.kv_cache_memory_bytes >= max(0, out.vllm_logged_requested_bytes)
    assert out.double_counted_bytes == (estimate if applied else 0) + (actual - out.graph_bytes)
    assert out.fit_requested.num_blocks * inp.bytes_per_block <= out.fit_requested.kv_cache_memory_bytes


def test_a_target_without_room_gives_no_flag() -> None:
    # 150 MiB buffer: a request only 100 MiB above the non-KV memory leaves nothing to pin
    inp = _h100_llama()
    non_kv = 16 * GiB + 1 * GiB + 500 * MiB
    out = suggest_kv_cache_memory(replace(inp, requested_bytes=non_kv + 100 * MiB))
    assert not out.fit_requested.fits and out.fit_requested.kv_cache_memory_bytes == 0
    js = out.to_json()["fit_requested"]
    assert js["vllm_flag"] is None and js["sglang_flags"] is None and js["fits"] is False
    # the other target still has its flag (vLLM would read --kv-cache-memory-bytes=0 as "unset")
    assert out.fill_gpu.fits and out.to_json()["fill_gpu"]["vllm_flag"].startswith("--kv-cache-memory-bytes=")
