"""What the user asked the engine for: the serve flags, with None meaning "the engine's default".

One frozen object carries both engines' flags (a user compares them side by side), named as the engines
name them (the engines' own flag names). Engine modules resolve the None fields to their versioned defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from vramctl.core.engines.vllm_speculative import DraftModel

Engine = Literal["vllm", "sglang", "both"]
Entrypoint = Literal["server", "llm"]
"""vLLM's defaults differ between `vllm serve` (OpenAI server) and the `LLM` class (arg_utils.py:2940-3039)."""

LATEST_VLLM_VERSION = "0.34.0"
LATEST_SGLANG_VERSION = "0.5.23"


@dataclass(frozen=True)
class ServeSettings:
    # --- common --------------------------------------------------------------------------------------
    engine: Engine = "vllm"
    engine_version: str | None = None
    """None = the latest version vramctl knows (LATEST_VLLM_VERSION / LATEST_SGLANG_VERSION)."""
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    """Model dtype override (`--dtype`); `auto` = the checkpoint's torch_dtype."""
    quantization: str | None = None
    """`--quantization` (both engines): None = the checkpoint's own; `fp8` / `bitsandbytes` quantise an
    unquantised checkpoint while it loads (vramctl.core.quantization)."""
    free_memory_bytes: int | None = None
    """Free memory at start-up when other tenants hold part of the card (`--free-memory`)."""
    gpu_memory_bytes: int | None = None
    """A card's total, overriding the registry (`--gpu-memory 79.18GiB`)."""
    # --- vLLM ------------------------------------------------------------------------------------------
    gpu_memory_utilization: float | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_active_seqs: int | None = None
    """vLLM 0.31 →: requests admitted into RUNNING (≤ max_num_seqs); the runner and graphs stay sized by max_num_seqs."""
    block_size: int | None = None
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None
    enable_extensible_kv_cache: bool | None = None
    """vLLM `--enable-extensible-kv-cache` / `--no-enable-extensible-kv-cache` (0.34 →): None = the release's
    default (on for CUDA / ROCm without --kv-cache-memory-bytes; vramctl.core.engines.vllm.rules)."""
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    """vLLM `--enable-prefix-caching` / `--no-enable-prefix-caching`: None = the version's default (on; for hybrids
    from 0.28, where it sets mamba_cache_mode "align": vramctl/core/mamba_cache.py)."""
    async_scheduling: bool | None = None
    """vLLM `--async-scheduling` / `--no-async-scheduling`: None = on (the default vramctl assumes from 0.12); off,
    one batch is in flight per pipeline stage (sliding-window layers then keep fewer blocks per request)."""
    estimate_cudagraphs: bool | None = None
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; None = the version's default (on from 0.20)."""
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    max_cudagraph_capture_size: int | None = None
    cudagraph_mode: str | None = None
    """vLLM's `--compilation-config` `cudagraph_mode` (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY,
    FULL_AND_PIECEWISE); None: the version's default (or the optimization level's)."""
    optimization_level: int | None = None
    """vLLM's `-O0` … `-O3` (`--optimization-level`, 0.12 →: the CUDA-graph mode 0 → NONE, 1 → PIECEWISE, 2 and 3 →
    FULL_AND_PIECEWISE); None: not given."""
    entrypoint: Entrypoint = "server"
    kv_offloading_size_gib: float | None = None
    """vLLM `--kv-offloading-size`, GiB, total across TP ranks."""
    data_parallel_size: int = 1
    """vLLM `--data-parallel-size`: engine replicas, each with its own KV pool (vramctl.core.weights)."""
    enable_expert_parallel: bool = False
    """vLLM `--enable-expert-parallel`: whole experts spread over the TP × DP ranks instead of TP-split."""
    mamba_cache_dtype: str = "auto"
    """vLLM `--mamba-cache-dtype` (a hybrid's conv state; `auto` = the model dtype)."""
    mamba_ssm_cache_dtype: str = "auto"
    """vLLM `--mamba-ssm-cache-dtype` (`auto` = the conv-state dtype, or Nemotron-H's hook)."""
    mamba_cache_mode: str | None = None
    """vLLM `--mamba-cache-mode` (0.15 →: none / align / all; 0.32 →: none / align); None: not given
    (vramctl/core/mamba_cache.py)."""
    mamba_block_size: int | None = None
    """vLLM `--mamba-block-size` (0.12 →): the chunk mode 'all' aligns the block to (None: the config's mamba chunk
    size); 'align' sets the mamba block to the attention block and 'none' keeps one page, so it moves nothing there."""
    enable_lora: bool = False
    """vLLM `--enable-lora`: adapter slots allocated with the weights (vramctl.core.lora)."""
    max_loras: int | None = None
    max_lora_rank: int | None = None
    fully_sharded_loras: bool = False
    allow_long_max_model_len: bool = False
    """vLLM's `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1` (vllm/envs.py): a --max-model-len above the derived one is
    accepted with a warning instead of refused."""
    flashinfer_sampler: bool | None = None
    """vLLM's `VLLM_USE_FLASHINFER_SAMPLER` (None: not set): which sampler the profile run warms up
    (vramctl.core.engines.vllm_runtime)."""
    disable_custom_all_reduce: bool = False
    """vLLM `--disable-custom-all-reduce`: NCCL carries the TP reductions (graphs hold its buffers)."""
    use_v1_env: bool = False
    """`VLLM_USE_V1=1` (0.8.x): keeps V1 for LoRA / pipeline parallelism instead of falling back to V0."""
    # --- vLLM 0.30 → 0.33 features (vramctl.core.engines.vllm_features) ----------------------------------
    load_format: str | None = None
    """vLLM `--load-format`; only `ipc_cache` (0.30 →: weights mapped from a `vllm preload` daemon) moves a term."""
    weight_cache_mode: str | None = None
    """`--model-loader-extra-config '{"mode": ...}'` of `ipc_cache`: None = `zero_copy` (the default) or `copy`."""
    enable_sleep_mode: bool = False
    """vLLM `--enable-sleep-mode`: weights and KV in the CuMemAllocator pool so `/sleep` can free them."""
    enable_nccl_comm_suspend: bool = False
    """vLLM `--enable-nccl-comm-suspend` (0.30 →): sleep also frees the NCCL communicators."""
    sleep_mode_offload_cudagraph: bool = False
    """vLLM `--sleep-mode-offload-cudagraph` (0.32 →): sleep also backs the graph pool up to the host."""
    kv_offloading_backend: str | None = None
    """vLLM `--kv-offloading-backend`: None = `native`; `lmcache` leaves the capacity to the LMCache server."""
    speculative_method: str | None = None
    """vLLM `--speculative-config` `method` (`mtp`, `qwen3_next_mtp`, `deepseek_mtp`, `eagle`, `eagle3`, `ngram`,
    `draft_model`, …); None: no speculative decoding (vramctl.core.engines.vllm_speculative)."""
    num_speculative_tokens: int = 0
    """`--speculative-config` `num_speculative_tokens` (0: none)."""
    speculative_model: str | None = None
    """`--speculative-config` `model`: the draft model's name or path (EAGLE / draft_model)."""
    speculative_draft_tensor_parallel_size: int | None = None
    """`--speculative-config` `draft_tensor_parallel_size` (None: the target's TP)."""
    speculative_enforce_eager: bool | None = None
    """`--speculative-config` `enforce_eager` (None: the target's `--enforce-eager`): no drafter CUDA graphs."""
    speculative_draft: DraftModel | None = None
    """The draft model loaded from `speculative_model` (the CLI loads it through the registry); None: not loaded,
    and the plan says its weights and KV are not counted."""
    # --- vLLM multimodal encoder profiling (vramctl.core.engines.vllm.multimodal) -------------------------
    limit_mm_per_prompt: tuple[tuple[str, int], ...] | None = None
    """vLLM `--limit-mm-per-prompt`: (modality, items) pairs; None: the version's default per modality."""
    mm_max_pixels: int | None = None
    """`--mm-processor-kwargs` `max_pixels` (a dynamic-resolution processor's largest image); None: the checkpoint's."""
    skip_mm_profiling: bool = False
    """vLLM `--skip-mm-profiling` (0.10.2 →): the encoder is not profiled."""
    language_model_only: bool = False
    """vLLM `--language-model-only` (0.17 →): every modality limit 0."""
    mm_encoder_tp_mode: str | None = None
    """vLLM `--mm-encoder-tp-mode`: `weights` (default) or `data`."""
    kv_cache_memory_suggestion: bool = False
    """vramctl `plan --kv-cache-memory-suggestion`: predict vLLM's `--kv-cache-memory=` log line and vramctl's."""
    # --- SGLang ----------------------------------------------------------------------------------------
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    max_prefill_tokens: int | None = None
    page_size: int | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    enable_hierarchical_cache: bool = False
    hicache_ratio: float | None = None
    hicache_size_gb: float | None = None
    """SGLang `--hicache-size`, decimal GB per rank; overrides the ratio when > 0."""
    # --- host --------------------------------------------------------------------------------------------
    host_memory_bytes: int | None = None
    """Host RAM to check pinned tiers against (`--host-memory`; the CLI reads the machine's when unset)."""

    def with_changes(self, **changes: object) -> ServeSettings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


def parse_version(text: str) -> tuple[int, ...]:
    """`0.11.0` → (0, 11, 0); `0.6.6.post1` → (0, 6, 6); `v0.5.18` → (0, 5, 18). Raises ValueError."""
    cleaned = text.strip().lstrip("vV")
    parts: list[int] = []
    for piece in cleaned.split("."):
        digits = ""
        for ch in piece:
            if ch.isdigit():
                digits += ch
            else:
                break
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    if not parts:
        raise ValueError(f"not a version: {text!r}")
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)
