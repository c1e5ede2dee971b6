"""vLLM's `--kv-cache-memory=` suggestion as `plan` predicts it, and the one vramctl recommends instead.

After the real graph capture vLLM logs (`vllm/v1/worker/gpu_worker.py:1012-1068`, vLLM 0.33.0)

    non_kv = total_consumed + peak_activation_memory + cuda_graph_memory_bytes
    … `--kv-cache-memory={requested − non_kv − 150 MiB}` … to fit into requested memory, or
      `--kv-cache-memory={init free − non_kv − 150 MiB}` … to fully utilize gpu memory.

From 0.28.0 `peak_activation_memory` = transient headroom + the *applied* CUDA-graph estimate
(`gpu_worker.py:748-749` in 0.33.0, `:542-543` in 0.28.0), so with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on (the
default from 0.20) the graph pool is counted twice: once estimated, once captured. 0.20.0, 0.21.0 and 0.26.0 set
`peak_activation_memory = torch_peak_increase` (`gpu_worker.py:406` / `:428` / `:526`) and count it once (PR #37426
had fixed the first double count; the accounting rewrite PR #49208 brought it back, vLLM issue #57936). The open fix
is PR #57983; no release through 0.34.0 contains it (`gpu_worker.py:771-773`, `:1135-1140` (0.34.0)). With VLLM_ENABLE_STARTUP_PLAN=1 (0.31 →,
`maybe_save_startup_plan`) the short value is also persisted and reused at the next start.

The message is logged at INFO in 0.10.2 and from 0.26 (DEBUG in 0.11 – 0.21: `logger.debug(msg)`, 0.20.0/0.21.0).
vramctl's recommendation counts the pool once (vramctl.core.suggest, the same arithmetic `vramctl suggest` applies
to a measured profile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.suggest import VLLM_REDUNDANCY_BYTES, SuggestInput, suggest_kv_cache_memory
from vramctl.core.units import vllm_format_gib

DOUBLE_COUNT_FIXED_IN: str | None = None
"""The first release with PR #57983 (None: not released as of 0.34.0)."""
CITATION = (
    "vllm/v1/worker/gpu_worker.py compile_or_warm_up_model (0.33.0: lines 1012-1068; peak_activation_memory at "
    "lines 748-749; 0.34.0: lines 1121-1178, 771-773); vLLM issue #57936, open fix PR #57983"
)


def double_counts(version: str) -> bool:
    """`VllmRules.suggestion_double_counts_graphs` (its fix, `DOUBLE_COUNT_FIXED_IN`, unreleased)."""
    return rules_for(version).suggestion_double_counts_graphs


def log_level(version: str) -> str:
    return "DEBUG" if rules_for(version).suggestion_log_debug else "INFO"


@dataclass(frozen=True)
class PlannedSuggestion:
    version: str
    vllm_fit_requested_bytes: int
    vllm_fill_gpu_bytes: int
    fit_requested_bytes: int
    fill_gpu_bytes: int
    double_counted_bytes: int
    log_level: str

    def to_json(self) -> dict[str, Any]:
        return {
            "vllm_logged": {
                "fit_requested_bytes": self.vllm_fit_requested_bytes,
                "fill_gpu_bytes": self.vllm_fill_gpu_bytes,
                "log_level": self.log_level,
            },
            "vramctl": {
                "fit_requested_bytes": self.fit_requested_bytes,
                "fill_gpu_bytes": self.fill_gpu_bytes,
            },
            "double_counted_bytes": self.double_counted_bytes,
            "fixed_in": DOUBLE_COUNT_FIXED_IN,
            "citation": CITATION,
        }


def plan_suggestion(
    version: str,
    *,
    total: int,
    init_free: int,
    requested: int,
    utilization: float,
    consumed: int,
    transient_peak: int,
    graph_bytes: int,
    graph_charged: bool,
) -> PlannedSuggestion | None:
    """The suggestion from the plan's terms (per rank of the binding stage): `consumed` = weights + non-torch growth
    since the init snapshot, `transient_peak` the activation peak, `graph_bytes` the pool (the planned capture stands
    for both vLLM's estimate and its measured capture). None before 0.10 (no suggestion)."""
    if not rules_for(version).kv_cache_memory_suggestion:
        return None
    inp = SuggestInput(
        total_bytes=total,
        init_free_bytes=init_free,
        requested_bytes=requested,
        gpu_memory_utilization=utilization,
        total_consumed_bytes=consumed,
        transient_peak_bytes=transient_peak,
        cuda_graph_estimate_bytes=graph_bytes if graph_charged else 0,
        cuda_graph_actual_bytes=graph_bytes,
        estimate_applied=graph_charged and double_counts(version),
        bytes_per_block=1,
        block_size=1,
        blocks_per_request=1,
        max_model_len=1,
        sglang_pre_load_free_bytes=0,
        sglang_post_load_free_bytes=0,
        sglang_cell_bytes=0,
    )
    r = suggest_kv_cache_memory(inp)
    return PlannedSuggestion(
        version=version,
        vllm_fit_requested_bytes=r.vllm_logged_requested_bytes,
        vllm_fill_gpu_bytes=r.vllm_logged_gpu_bytes,
        fit_requested_bytes=requested - r.non_kv_bytes - VLLM_REDUNDANCY_BYTES,
        fill_gpu_bytes=init_free - r.non_kv_bytes - VLLM_REDUNDANCY_BYTES,
        double_counted_bytes=r.double_counted_bytes,
        log_level=log_level(version),
    )


def notes(ps: PlannedSuggestion) -> list[str]:
    logged = (
        f"vLLM {ps.version} will log ({ps.log_level}) `Replace gpu_memory_utilization config with "
        f"`--kv-cache-memory={ps.vllm_fit_requested_bytes}` ({vllm_format_gib(ps.vllm_fit_requested_bytes)} GiB) to "
        f"fit into requested memory, or `--kv-cache-memory={ps.vllm_fill_gpu_bytes}` "
        f"({vllm_format_gib(ps.vllm_fill_gpu_bytes)} GiB) to fully utilize gpu memory` (planned values)."
    )
    if ps.double_counted_bytes <= 0:
        return [logged + f" It counts the CUDA-graph pool once; vramctl agrees ({CITATION})."]
    negative = ps.vllm_fit_requested_bytes <= 0
    return [
        logged
        + f" It counts the CUDA-graph pool twice ({vllm_format_gib(ps.double_counted_bytes)} GiB: the applied "
        "estimate inside peak activation plus the captured pool)"
        + ("; the value is negative and cannot be used" if negative else "")
        + f". vramctl recommends --kv-cache-memory-bytes={max(0, ps.fit_requested_bytes)} "
        f"({vllm_format_gib(max(0, ps.fit_requested_bytes))} GiB) to fit the requested memory, or "
        f"{max(0, ps.fill_gpu_bytes)} ({vllm_format_gib(max(0, ps.fill_gpu_bytes))} GiB) to fill the card "
        f"({CITATION})."
    ]
