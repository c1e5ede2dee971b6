"""From readings to the result, exactly: vLLM's subtraction, blocks (min over ranks), verdicts, the ledger."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from measure_helpers import tiny_dense

from vramctl.core.units import GiB, MiB
from vramctl.measure.device import DeviceInfo, Snapshot
from vramctl.measure.profiler import ProfileRequest, RankMeasurement, Resolved, derive

TOTAL = 80 * GiB
CUDA = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", other_processes_bytes=0)


def _snap(free: int, *, allocated: int = 0, peak: int = 0, reserved: int = 0) -> Snapshot:
    return Snapshot(free, TOTAL, allocated, peak, reserved, reserved, 0.0)


def _resolved(**changes: object) -> Resolved:
    base = Resolved(
        engine_version="0.33.0",
        gpu_memory_utilization=0.92,
        max_model_len=2048,
        max_num_batched_tokens=8192,
        max_num_seqs=256,
        block_size=16,
        kv_cache_dtype="auto",
        enforce_eager=False,
        estimate_cudagraphs=True,
        capture_sizes=(1, 2, 4, 8),
        tensor_parallel_size=1,
        dtype="auto",
        mem_fraction_static=0.8,
        num_layers=None,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def _rank(
    rank: int = 0,
    *,
    init_free: int = 79 * GiB,
    weights: int = 10 * GiB,
    consumed: int = 12 * GiB,
    transient: int = 1 * GiB,
    estimate: int = 512 * MiB,
    others: int = 0,
) -> RankMeasurement:
    requested = -(-TOTAL * 92 // 100)
    after = _snap(init_free - consumed, allocated=weights, peak=weights + transient, reserved=consumed)
    return RankMeasurement(
        rank=rank,
        init=_snap(init_free),
        after_weights=_snap(init_free - weights, allocated=weights, peak=weights, reserved=weights),
        before_profile=_snap(init_free - weights, allocated=weights, peak=weights, reserved=weights),
        after_profile=after,
        requested_bytes=requested,
        weights_bytes=weights,
        weights_measured_bytes=weights,
        weight_tensor_bytes=weights,
        unbuilt_weight_bytes=0,
        layers_built=4,
        layers_total=4,
        total_consumed_bytes=consumed,
        transient_peak_bytes=transient,
        cuda_graph_estimate_bytes=estimate,
        cuda_graph_actual_bytes=estimate // 2,
        cuda_graph_samples_bytes=(estimate // 4,),
        phase_seconds={},
        other_processes_bytes=others,
    )


def test_vllm_consumed_subtraction_exactly() -> None:
    request = ProfileRequest(spec=tiny_dense())
    r = _rank()
    result = derive(request, _resolved(), CUDA, [r])
    expected_kv = r.requested_bytes - (12 * GiB + 1 * GiB) - 512 * MiB
    assert result.kv_cache_bytes == expected_kv
    assert result.bytes_per_block == 4 * 16 * 2 * 64 * 2 * 2
    assert result.num_blocks == expected_kv // result.bytes_per_block
    assert result.blocks_per_request == 2048 // 16
    assert result.max_concurrency == round(result.num_blocks / 128, 4)
    assert result.kv_tokens == int(result.num_blocks / 128 * 2048)
    assert result.verdict == "fits" and result.max_model_len_fit == 2048
    terms = result.ledger.as_mapping()
    assert terms["weights"].bytes == 10 * GiB
    assert (
        terms["non_torch"].bytes == (TOTAL - 79 * GiB) + 2 * GiB
    )  # pre-snapshot own usage + consumed − weights
    assert terms["cuda_graph"].bytes == 512 * MiB
    assert terms["slack"].bytes == 79 * GiB - r.requested_bytes
    assert "other_processes" not in terms


def test_estimate_off_is_not_subtracted() -> None:
    request = ProfileRequest(spec=tiny_dense())
    result = derive(request, _resolved(estimate_cudagraphs=False), CUDA, [_rank()])
    assert result.cuda_graph_applied_bytes == 0
    assert result.kv_cache_bytes == _rank().requested_bytes - 13 * GiB
    assert any("not subtracted" in note for note in result.notes)


def test_older_versions_use_the_profile_sum() -> None:
    # ≤0.26: non_kv = non_torch_increase + torch_peak_increase + weights (vllm.md §1.3)
    request = ProfileRequest(spec=tiny_dense())
    r = _rank()
    result = derive(request, _resolved(engine_version="0.11.0", estimate_cudagraphs=False), CUDA, [r])
    non_torch_increase = r.after_profile.non_torch_bytes - r.init.non_torch_bytes
    peak_increase = r.after_profile.torch_peak_bytes - r.before_profile.torch_allocated_bytes
    assert result.kv_cache_bytes == r.requested_bytes - (non_torch_increase + peak_increase + r.weights_bytes)


def test_min_over_ranks_and_binding_rank() -> None:
    request = ProfileRequest(spec=tiny_dense())
    ranks = [_rank(0), _rank(1, consumed=14 * GiB)]
    result = derive(request, _resolved(tensor_parallel_size=2), CUDA, ranks)
    assert result.binding_rank == 1
    assert result.kv_cache_bytes == ranks[1].requested_bytes - 15 * GiB - 512 * MiB
    assert result.bytes_per_block == 4 * 16 * 1 * 64 * 2 * 2  # one KV head per rank
    assert any("rank 1" in note for note in result.notes)


def test_other_processes_term() -> None:
    request = ProfileRequest(spec=tiny_dense())
    r = _rank(init_free=60 * GiB, others=19 * GiB)
    result = derive(
        request, _resolved(gpu_memory_utilization=0.7), CUDA, [replace(r, requested_bytes=56 * GiB)]
    )
    terms = result.ledger.as_mapping()
    assert terms["other_processes"].bytes == 19 * GiB
    assert terms["non_torch"].bytes == (TOTAL - 60 * GiB - 19 * GiB) + 2 * GiB
    assert sum(t.bytes for t in result.ledger.terms) == TOTAL


def test_verdicts() -> None:
    request = ProfileRequest(spec=tiny_dense())
    none_left = derive(request, _resolved(), CUDA, [_rank(consumed=80 * GiB)])
    assert none_left.verdict == "no-kv-cache-memory"
    assert none_left.num_blocks == 0 and none_left.max_model_len_fit == 0
    assert any("No available memory for the cache blocks" in n for n in none_left.notes)
    # leave room for 100 blocks of 16 tokens: a 2048-token request needs 128
    bpb = 4 * 16 * 2 * 64 * 2 * 2
    r = _rank()
    consumed = r.requested_bytes - 1 * GiB - 512 * MiB - 100 * bpb
    tight = derive(request, _resolved(), CUDA, [_rank(consumed=consumed)])
    assert tight.num_blocks == 100
    assert tight.verdict == "kv-cache-too-small-for-max-model-len"
    assert tight.max_model_len_fit == 99 * 16  # one block is vLLM's null block


@settings(max_examples=60, deadline=None)
@given(
    consumed=st.integers(0, 70 * GiB),
    transient=st.integers(0, 8 * GiB),
    estimate=st.integers(0, 4 * GiB),
    others=st.integers(0, 1 * GiB),
)
def test_ledger_always_sums_to_the_total(consumed: int, transient: int, estimate: int, others: int) -> None:
    request = ProfileRequest(spec=tiny_dense())
    r = _rank(consumed=consumed, transient=transient, estimate=estimate, others=others)
    result = derive(request, _resolved(), CUDA, [r])
    assert sum(t.bytes for t in result.ledger.terms) == TOTAL
    assert result.num_blocks == max(0, result.kv_cache_bytes) // result.bytes_per_block
    assert result.ledger.bytes_of("kv_cache") == result.kv_cache_bytes


def test_vllm_graph_estimate_extrapolation() -> None:
    from vramctl.measure.cuda_graphs import vllm_estimate

    # first + (n − 1) × max(second, 1 MiB) (gpu_model_runner.py:6268-6414)
    assert vllm_estimate([]) == 0
    assert vllm_estimate([300 * MiB]) == 300 * MiB
    assert vllm_estimate([300 * MiB, 4 * MiB, 2 * MiB, 2 * MiB]) == 300 * MiB + 3 * 4 * MiB
    assert vllm_estimate([300 * MiB, 0, 0]) == 300 * MiB + 2 * MiB  # the 1 MiB floor per graph


def test_sglang_default_fraction_for_the_measured_card() -> None:
    from vramctl.measure.profiler import sglang_default_fraction
    from vramctl.registry import load_model

    spec = load_model("meta-llama/Meta-Llama-3-8B-Instruct")
    h100 = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3")
    # sglang.md §1.7 worked defaults (0.5.18 rules): H100 tp1 0.830, tp2 0.828
    assert sglang_default_fraction(spec, 85_031_714_816, 1, h100) == 0.83
    assert sglang_default_fraction(spec, 85_031_714_816, 2, h100) == 0.828


def test_sglang_numbers_from_the_same_readings() -> None:
    request = ProfileRequest(spec=tiny_dense())
    r = _rank()
    result = derive(request, _resolved(mem_fraction_static=0.8), CUDA, [r])
    s = result.sglang
    assert s is not None and s.fraction_source == "given"
    assert s.pre_load_free_bytes == 79 * GiB and s.post_load_free_bytes == 69 * GiB
    assert s.kv_cache_bytes == int(69 * GiB - 79 * GiB * (1 - 0.8))
    assert s.cell_bytes_per_token == 4 * 2 * 64 * 2 * 2
    assert s.max_total_num_tokens == s.kv_cache_bytes // s.cell_bytes_per_token


def test_vllm_034_extensible_sizing_on_a_cuda_device() -> None:
    """vLLM 0.34's extensible KV cache (`measure_kv_cache_bytes`, vllm/v1/worker/extensible_kv_cache.py:592-618):
    u 1.0 requests the whole card; used = consumed + the captured graph pool, reserve = transient + the applied graph
    estimate, margin = max(1 GiB, 0.75 × reserve): kv = min(requested − used, init free − used − margin) − reserve."""
    request = ProfileRequest(spec=tiny_dense())
    r = replace(_rank(), requested_bytes=TOTAL)
    result = derive(request, _resolved(engine_version="0.34.0", gpu_memory_utilization=1.0, block_size=64), CUDA, [r])
    used = 12 * GiB + 256 * MiB  # consumed + the captured pool (the actual capture, half the estimate here)
    reserve = 1 * GiB + 512 * MiB
    margin = max(GiB, int(reserve * 0.75))
    assert result.kv_cache_bytes == min(TOTAL - used, 79 * GiB - used - margin) - reserve
    assert result.num_blocks == result.kv_cache_bytes // result.bytes_per_block
    # on a CPU device, or with --no-enable-extensible-kv-cache, the profile estimate as before
    off = ProfileRequest(spec=tiny_dense(), settings=request.settings.with_changes(enable_extensible_kv_cache=False))
    plain = derive(off, _resolved(engine_version="0.34.0", gpu_memory_utilization=1.0, block_size=64), CUDA, [r])
    assert plain.kv_cache_bytes == TOTAL - (12 * GiB + 1 * GiB) - 512 * MiB
