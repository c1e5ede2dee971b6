"""vLLM's messages, verbatim by version: the errors it raises and the log lines vramctl reproduces
(`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), `vllm/v1/core/kv_cache_utils.py` (vLLM v0.33.0); the 0.34 hints in
`vllm/v1/core/kv_cache_planning.py` (0.34.0))."""

from __future__ import annotations

from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.units import GiB, vllm_format_gib


def free_memory_error(
    *, device: str, free: str, total: str, util: float, requested: str, version: str
) -> str:
    """`request_memory` ValueError (`vllm/v1/worker/utils.py:716-772`; 0.11.0 had no device token)."""
    where = f"Free memory on device {device} " if rules_for(version).new_wordings else "Free memory on device "
    return (
        f"{where}({free}/{total} GiB) on startup is less than desired GPU memory utilization "
        f"({util}, {requested} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


_CONSERVING = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def kv_memory_hint(*, extensible: bool, utilization: float, after_warmup: bool) -> str:
    """vLLM 0.34's `_more_kv_cache_memory_hint` (`vllm/v1/core/kv_cache_planning.py:63-96` (0.34.0)): how to make
    room for the KV cache, by sizing mode; `after_warmup`: the pool was sized after graph capture and warm-up."""
    if not extensible:
        return (
            "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU "
            "memory reservation on the CPU backend, despite its name)."
        )
    used_by = "the model, its activations, CUDA graphs and warmup" if after_warmup else "the model and its activations"
    graphs_hint = (
        " CUDA graphs take less with fewer or smaller capture sizes in the compilation config." if after_warmup else ""
    )
    if utilization < 1.0:
        return (
            f"The KV cache gets what is left after {used_by} within `gpu_memory_utilization`={utilization}; "
            "increase it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or "
            f"`max_num_seqs`.{graphs_hint}"
        )
    return (
        f"The extensible KV cache already takes all device memory left after {used_by}; decrease `max_model_len` "
        f"or `max_num_seqs`, or the model needs a device with more memory.{graphs_hint}"
    )


def no_cache_memory_error(version: str, hint: str | None = None) -> str:
    """`kv_cache_planning.py:56-64`; ≤0.11.0 stopped after "…initializing the engine."; 0.34 puts `hint`
    (`kv_memory_hint`) in the middle (`vllm/v1/core/kv_cache_planning.py:106-112` (0.34.0))."""
    if rules_for(version).extensible_kv_cache and hint is not None:
        return f"No available memory for the cache blocks. {hint} {_CONSERVING}"
    base = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine"
    if not rules_for(version).new_wordings:
        return base + "."
    return (
        base + " (this flag also controls CPU memory reservation on the CPU backend, despite its name). "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )


def one_request_error(
    *, max_model_len: int, needed: str, available: str, estimated: int, version: str, hint: str | None = None
) -> str:
    """`kv_cache_planning.py:66-87` ("To serve at least one request…"); ≤0.11.0 wording in
    `[0.11.0] kv_cache_utils.py:716-723`; 0.34 ends with `hint` (`kv_memory_hint`,
    `vllm/v1/core/kv_cache_planning.py:113-132` (0.34.0))."""
    estimated_msg = (
        f"Based on the available memory, the estimated maximum model length is {estimated}. "
        if estimated > 0
        else ""
    )
    if rules_for(version).extensible_kv_cache and hint is not None:
        return (
            f"To serve at least one request with the model's max seq len ({max_model_len}), ({needed} GiB KV cache "
            f"is needed, which is larger than the available KV cache memory ({available} GiB). {estimated_msg}"
            f"{hint} Decreasing `max_model_len` also reduces what is needed. {_CONSERVING}"
        )
    if not rules_for(version).new_wordings:
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




def mamba_blocks_error(max_num_seqs: int, num_blocks: int) -> str:
    """`CompilationConfig` (`[0.32.0] vllm/config/compilation.py:1518-1524`): full CUDA graphs with Mamba layers and
    more sequences than KV-cache blocks."""
    return (
        f"max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks ({num_blocks}). Each decode sequence "
        "requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most "
        f"{num_blocks} or increase gpu_memory_utilization."
    )


def gib_text(n_bytes: int, version: str) -> str:
    """A size in the version's messages: vLLM's GiB format from 0.12, two decimals before."""
    return vllm_format_gib(n_bytes) if rules_for(version).new_wordings else f"{n_bytes / GiB:.2f}"


# --- vramctl's words for failures vLLM meets without a message of its own ------------------------------------


def no_free_memory_check(version: str, requested: int, snapshot_free: int) -> str:
    """Before the free-memory check (`VllmRules.checks_free_memory`): the request goes ahead and the KV allocation
    runs out of memory."""
    return (
        f"vLLM {version} has no start-up check of free memory: it will request "
        f"{vllm_format_gib(requested)} GiB with about {vllm_format_gib(max(0, snapshot_free))} GiB free and "
        "run out of memory allocating the KV cache; lower --gpu-memory-utilization."
    )


def weights_do_not_fit(weights: int, limit: int, *, profiled: bool) -> str:
    """The weights alone exceed the budget (profiled) or the free memory (`--kv-cache-memory-bytes`)."""
    return (
        f"The weights alone ({weights / GiB:.2f} GiB per rank) exceed the "
        f"{'requested budget' if profiled else 'free memory'} ({limit / GiB:.2f} GiB): "
        "Failed to load model - not enough GPU memory."
    )


def kv_pool_overcommit(kv_cache_memory_bytes: int, weights: int, free: int, over: int) -> str:
    """`--kv-cache-memory-bytes` + the weights + the CUDA context exceed the free memory: certain, not estimated."""
    return (
        f"--kv-cache-memory-bytes {kv_cache_memory_bytes / GiB:.2f} GiB + the weights ({weights / GiB:.2f} "
        f"GiB per rank) + the CUDA context exceed the {free / GiB:.2f} GiB free by "
        f"{over / GiB:.2f} GiB: vLLM skips profiling and runs out of memory allocating the KV cache; lower "
        f"--kv-cache-memory-bytes below {max(0, kv_cache_memory_bytes - over) / GiB:.2f} GiB"
    )


def v0_kv_too_small(max_model_len: int, kv_tokens: int) -> str:
    """V0's start-up error when the pool holds fewer tokens than one max_model_len request (`[0.6.6.post1]
    vllm/worker/worker.py` raise_if_cache_size_invalid)."""
    return (
        f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens that can be "
        f"stored in KV cache ({kv_tokens}). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine."
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
