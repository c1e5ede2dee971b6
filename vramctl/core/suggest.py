"""An explicit KV-cache size from a measured profile: vLLM's `--kv-cache-memory-bytes` and SGLang's flags.

vLLM prints this suggestion itself after its real graph capture (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0),
`vllm/v1/worker/gpu_worker.py:991-1068`, vLLM 0.33.0):

    redundancy = 150 MiB                                   # "profiling may slightly underestimate"
    non_kv     = total_consumed + peak_activation_memory + cuda_graph_memory_bytes
    to_gpu     = init.free − non_kv − redundancy           # fills the card
    to_request = requested − non_kv − redundancy           # fits gpu_memory_utilization × total

where `peak_activation_memory` = transient headroom + the *applied* graph estimate (line 748). With
VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on (the default from 0.20), the graph pool is therefore counted
twice: once as the estimate, once as the actual capture. vramctl counts it once: the actual capture
when it was measured, else the estimate. `vllm_logged_*` reproduces vLLM's own (double-counted) numbers so
the two can be compared.

SGLang (`python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23)): KV = free_after_load − free_before_load × (1 − mfs), so a pool of
K bytes needs mfs = 1 − (free_after_load − K) / free_before_load. vramctl rounds mfs *up* to SGLang's three
decimals and pins the pool with `--max-total-tokens = K // cell_size` (the cap SGLang applies when it is
below the profiled value), so the pool is exactly K.

Pure arithmetic on ints; no device access.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from vramctl.core.units import MiB, format_bytes

VLLM_REDUNDANCY_BYTES = 150 * MiB
"""`redundancy_buffer_memory = 150 * (1 << 20)` (`gpu_worker.py:1026`)."""

Target = Literal["requested", "gpu"]


@dataclass(frozen=True)
class SuggestInput:
    """The measured numbers a suggestion needs (all bytes are per rank, the binding rank)."""

    total_bytes: int
    init_free_bytes: int
    requested_bytes: int
    gpu_memory_utilization: float
    total_consumed_bytes: int
    transient_peak_bytes: int
    cuda_graph_estimate_bytes: int
    cuda_graph_actual_bytes: int
    estimate_applied: bool
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS was on (the estimate is in vLLM's peak_activation_memory)."""
    bytes_per_block: int
    block_size: int
    blocks_per_request: int
    max_model_len: int
    sglang_pre_load_free_bytes: int
    sglang_post_load_free_bytes: int
    sglang_cell_bytes: int
    sglang_page_size: int = 1


@dataclass(frozen=True)
class KvSuggestion:
    target: Target
    kv_cache_memory_bytes: int
    num_blocks: int
    kv_tokens: int
    max_concurrency: float
    sglang_mem_fraction_static: float | None
    """None when no fraction in (0, 1) gives this pool."""
    sglang_max_total_tokens: int

    @property
    def fits(self) -> bool:
        """At least one KV block: below that there is no flag to give (vLLM reads
        `--kv-cache-memory-bytes=0` as unset and profiles as usual)."""
        return self.num_blocks >= 1

    @property
    def vllm_flag(self) -> str:
        return f"--kv-cache-memory-bytes={self.kv_cache_memory_bytes}"

    @property
    def sglang_flags(self) -> str:
        if self.sglang_mem_fraction_static is None:
            return f"--max-total-tokens={self.sglang_max_total_tokens}"
        return f"--mem-fraction-static={self.sglang_mem_fraction_static:.3f} --max-total-tokens={self.sglang_max_total_tokens}"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "num_blocks": self.num_blocks,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": self.max_concurrency,
            "fits": self.fits,
            "vllm_flag": self.vllm_flag if self.fits else None,
            "sglang_mem_fraction_static": self.sglang_mem_fraction_static,
            "sglang_max_total_tokens": self.sglang_max_total_tokens,
            "sglang_flags": self.sglang_flags if self.fits else None,
        }


@dataclass(frozen=True)
class SuggestResult:
    graph_bytes: int
    """The graph pool, counted once."""
    graph_source: Literal["actual", "estimate", "none"]
    non_kv_bytes: int
    """consumed + transient headroom + graph pool (once)."""
    redundancy_bytes: int
    fit_requested: KvSuggestion
    fill_gpu: KvSuggestion
    vllm_logged_requested_bytes: int
    """What vLLM's own log line would suggest to fit the request (graph pool counted twice when estimated)."""
    vllm_logged_gpu_bytes: int
    double_counted_bytes: int
    """vramctl's suggestion minus vLLM's logged one: with a measured capture, the applied estimate that vLLM
    counts a second time (0 when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is off)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "graph_bytes": self.graph_bytes,
            "graph_source": self.graph_source,
            "non_kv_bytes": self.non_kv_bytes,
            "redundancy_bytes": self.redundancy_bytes,
            "fit_requested": self.fit_requested.to_json(),
            "fill_gpu": self.fill_gpu.to_json(),
            "vllm_logged": {
                "fit_requested_bytes": self.vllm_logged_requested_bytes,
                "fill_gpu_bytes": self.vllm_logged_gpu_bytes,
                "double_counted_bytes": self.double_counted_bytes,
            },
        }


def graph_pool_once(inp: SuggestInput) -> tuple[int, Literal["actual", "estimate", "none"]]:
    """The graph pool counted once: the actual capture if measured, else the estimate, else nothing."""
    if inp.cuda_graph_actual_bytes > 0:
        return inp.cuda_graph_actual_bytes, "actual"
    if inp.cuda_graph_estimate_bytes > 0:
        return inp.cuda_graph_estimate_bytes, "estimate"
    return 0, "none"


def sglang_fraction_for(kv_bytes: int, pre_load_free: int, post_load_free: int) -> float | None:
    """The smallest 3-decimal mem_fraction_static whose pool is ≥ kv_bytes; None if none in (0, 1)."""
    if pre_load_free <= 0 or kv_bytes <= 0:
        return None
    exact = 1 - (post_load_free - kv_bytes) / pre_load_free
    mfs = math.ceil(exact * 1000 - 1e-9) / 1000
    if not 0 < mfs < 1:
        return None
    return mfs


def _suggestion(inp: SuggestInput, target: Target, kv_bytes: int) -> KvSuggestion:
    kv = max(0, kv_bytes)
    blocks = kv // inp.bytes_per_block if inp.bytes_per_block else 0
    concurrency = blocks / inp.blocks_per_request if inp.blocks_per_request else 0.0
    cell = inp.sglang_cell_bytes
    tokens = (kv // cell) // inp.sglang_page_size * inp.sglang_page_size if cell else 0
    return KvSuggestion(
        target=target,
        kv_cache_memory_bytes=kv,
        num_blocks=blocks,
        kv_tokens=int(concurrency * inp.max_model_len),
        max_concurrency=round(concurrency, 4),
        sglang_mem_fraction_static=sglang_fraction_for(
            kv, inp.sglang_pre_load_free_bytes, inp.sglang_post_load_free_bytes
        ),
        sglang_max_total_tokens=tokens,
    )


def suggest_kv_cache_memory(
    inp: SuggestInput, *, redundancy_bytes: int = VLLM_REDUNDANCY_BYTES
) -> SuggestResult:
    """The KV sizes that fit the requested memory and that fill the card, graph pool counted once."""
    graph, source = graph_pool_once(inp)
    non_kv = inp.total_consumed_bytes + inp.transient_peak_bytes + graph
    to_requested = inp.requested_bytes - non_kv - redundancy_bytes
    to_gpu = inp.init_free_bytes - non_kv - redundancy_bytes
    applied = inp.cuda_graph_estimate_bytes if inp.estimate_applied else 0
    vllm_non_kv = (
        inp.total_consumed_bytes + (inp.transient_peak_bytes + applied) + inp.cuda_graph_actual_bytes
    )
    vllm_req = inp.requested_bytes - vllm_non_kv - redundancy_bytes
    vllm_gpu = inp.init_free_bytes - vllm_non_kv - redundancy_bytes
    return SuggestResult(
        graph_bytes=graph,
        graph_source=source,
        non_kv_bytes=non_kv,
        redundancy_bytes=redundancy_bytes,
        fit_requested=_suggestion(inp, "requested", to_requested),
        fill_gpu=_suggestion(inp, "gpu", to_gpu),
        vllm_logged_requested_bytes=vllm_req,
        vllm_logged_gpu_bytes=vllm_gpu,
        double_counted_bytes=to_requested - vllm_req,
    )


def describe(result: SuggestResult) -> str:
    """One line: the two sizes as flags."""
    return (
        f"fit the requested memory: {result.fit_requested.vllm_flag} ({format_bytes(result.fit_requested.kv_cache_memory_bytes)}); "
        f"fill the card: {result.fill_gpu.vllm_flag} ({format_bytes(result.fill_gpu.kv_cache_memory_bytes)})"
    )


__all__ = [
    "VLLM_REDUNDANCY_BYTES",
    "KvSuggestion",
    "SuggestInput",
    "SuggestResult",
    "describe",
    "graph_pool_once",
    "sglang_fraction_for",
    "suggest_kv_cache_memory",
]
