"""vLLM's messages, verbatim by version: the errors it raises and the log lines vramctl reproduces
(`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), `vllm/v1/core/kv_cache_utils.py` (vLLM v0.33.0))."""

from __future__ import annotations

from vramctl.core.engines.vllm.rules import _v


def free_memory_error(
    *, device: str, free: str, total: str, util: float, requested: str, version: str
) -> str:
    """`request_memory` ValueError (`vllm/v1/worker/utils.py:716-772`; 0.11.0 had no device token)."""
    where = f"Free memory on device {device} " if _v(version) > (0, 11, 99) else "Free memory on device "
    return (
        f"{where}({free}/{total} GiB) on startup is less than desired GPU memory utilization "
        f"({util}, {requested} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


def no_cache_memory_error(version: str) -> str:
    """`kv_cache_planning.py:56-64`; ≤0.11.0 stopped after "…initializing the engine."."""
    base = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine"
    if _v(version) <= (0, 11, 99):
        return base + "."
    return (
        base + " (this flag also controls CPU memory reservation on the CPU backend, despite its name). "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )


def one_request_error(
    *, max_model_len: int, needed: str, available: str, estimated: int, version: str
) -> str:
    """`kv_cache_planning.py:66-87` ("To serve at least one request…"); ≤0.11.0 wording in
    `[0.11.0] kv_cache_utils.py:716-723`."""
    estimated_msg = (
        f"Based on the available memory, the estimated maximum model length is {estimated}. "
        if estimated > 0
        else ""
    )
    if _v(version) <= (0, 11, 99):
        return (
            f"To serve at least one request with the models's max seq len ({max_model_len}), ({needed} GiB KV cache "
            f"is needed, which is larger than the available KV cache memory ({available} GiB). {estimated_msg}"
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    return (
        f"To serve at least one request with the model's max seq len ({max_model_len}), ({needed} GiB KV cache is "
        f"needed, which is larger than the available KV cache memory ({available} GiB). {estimated_msg}"
        "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
        "`max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )



# --- hybrid attention + Mamba / linear-attention models (docs/hybrid.md) --------------------------------------


def hybrid_block_size_log(block_size: int) -> str:
    """INFO from HybridAttentionMambaModelConfig / `_align_hybrid_block_size` (`interface.py:940-1140`, `vllm/v1/kv_cache_interface.py` (vLLM v0.33.0); 017.log of the collected start-ups prints it as `[interface.py:645]`)."""
    return (
        f"Setting attention block size to {block_size} tokens to ensure that attention page size is >= mamba "
        "page size."
    )


def hybrid_padding_log(padding_pct: float) -> str:
    """INFO that follows when the attention page exceeds the mamba page (same function, `vllm/v1/kv_cache_interface.py` (vLLM v0.33.0))."""
    return (
        f"Padding mamba page size by {padding_pct:.2f}% to ensure that mamba page size and attention page size "
        "are exactly equal."
    )
