"""`profile` / `suggest` resolve the engine settings through the function `plan` uses
(`vramctl.core.engines.vllm.planner.resolve_vllm`): on the same card and flags, block size (MLA's 64 on Hopper,
128 on Blackwell), scheduler limits, capture sizes, utilisation and length agree."""

from __future__ import annotations

import pytest

from vramctl.core.plan import plan
from vramctl.core.settings import ServeSettings
from vramctl.measure.device import DeviceInfo
from vramctl.measure.profiler import ProfileRequest, resolve
from vramctl.registry import load_gpu, load_model

CASES = [
    ("llama-3-8b", "h100-sxm", ServeSettings()),
    ("qwen3-8b", "l40s", ServeSettings(max_model_len=16384)),
    ("deepseek-v2-lite", "h100-sxm", ServeSettings()),  # MLA on Hopper: FlashMLA's block 64
    ("deepseek-v2-lite", "b200", ServeSettings(tensor_parallel_size=2)),  # MLA on Blackwell: 128
    ("gpt-oss-20b", "h200", ServeSettings(enforce_eager=True)),
    ("gpt-oss-20b", "h100-sxm", ServeSettings(enable_chunked_prefill=False)),
    ("qwen3-next-80b-a3b", "h200", ServeSettings(tensor_parallel_size=4)),  # hybrid: the aligned block size
    ("llama-3-8b", "a100-80gb", ServeSettings(engine_version="0.11.0", max_num_seqs=64)),
    ("qwen3-8b", "h100-sxm", ServeSettings(cudagraph_capture_sizes=(1, 2, 4, 8, 100000))),
]


def _resolved(model: str, gpu_name: str, settings: ServeSettings):  # type: ignore[no-untyped-def]
    gpu = load_gpu(gpu_name)
    info = DeviceInfo(kind="cuda", name=gpu_name, compute_capability=gpu.compute_capability)
    return resolve(ProfileRequest(spec=load_model(model), settings=settings), info, gpu.cuda_total_bytes)


@pytest.mark.parametrize(("model", "gpu_name", "settings"), CASES)
def test_profile_resolves_what_plan_resolves(model: str, gpu_name: str, settings: ServeSettings) -> None:
    planned = plan(load_model(model), load_gpu(gpu_name), settings).settings
    profiled = _resolved(model, gpu_name, settings)
    assert (
        profiled.block_size,
        profiled.max_model_len,
        profiled.max_num_batched_tokens,
        profiled.max_num_seqs,
        profiled.capture_sizes,
        profiled.gpu_memory_utilization,
        profiled.estimate_cudagraphs,
        profiled.enforce_eager,
    ) == (
        planned.block_size,
        planned.max_model_len,
        planned.max_num_batched_tokens,
        planned.max_num_seqs,
        planned.cudagraph_capture_sizes,
        planned.gpu_memory_utilization,
        planned.estimate_cudagraphs,
        planned.enforce_eager,
    )


def test_mla_block_size_follows_the_card() -> None:
    v033 = ServeSettings(engine_version="0.33.0")
    assert _resolved("deepseek-v2-lite", "h100-sxm", v033).block_size == 64
    assert _resolved("deepseek-v2-lite", "b200", v033).block_size == 128
    assert _resolved("deepseek-v2-lite", "a100-80gb", v033).block_size == 16
    assert _resolved("llama-3-8b", "h100-sxm", v033).block_size == 16
    # 0.34: the default block is 64 (vllm/config/cache.py:185); CUTLASS MLA still raises it to 128
    assert _resolved("deepseek-v2-lite", "b200", ServeSettings()).block_size == 128
    assert _resolved("deepseek-v2-lite", "a100-80gb", ServeSettings()).block_size == 64
    assert _resolved("llama-3-8b", "h100-sxm", ServeSettings()).block_size == 64


def test_capture_sizes_above_the_token_budget_are_dropped_as_plan_drops_them() -> None:
    sizes = _resolved("qwen3-8b", "h100-sxm", ServeSettings(cudagraph_capture_sizes=(1, 2, 100000))).capture_sizes
    assert sizes == (1, 2)


def test_profile_refuses_what_plan_refuses() -> None:
    from vramctl.core.errors import BadInputError

    with pytest.raises(BadInputError, match="--max-model-len 100000"):
        _resolved("llama-3-8b", "h100-sxm", ServeSettings(max_model_len=100000))
