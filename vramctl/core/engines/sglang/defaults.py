"""SGLang's defaults that depend on the card: the GPU tier (chunked prefill, graph max_bs), the CUDA-graph
batch lists, max_running_requests and nvidia-smi's total."""

from __future__ import annotations

from dataclasses import dataclass

from vramctl.core.engines.sglang.rules import (
    OLD_DEFAULT_CUDA_GRAPH_MAX_BS,
    RULES_0_4_6,
    RULES_0_5_2,
    RULES_0_5_9,
    RULES_0_5_23,
)
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec
from vramctl.core.units import MiB


@dataclass(frozen=True)
class GpuTier:
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    label: str


def gpu_tier(gpu_mem_mib: int | None, tp: int, rules: str) -> GpuTier:
    """chunked_prefill_size and decode graph max_bs for a card (0.5.18 L4829–L4889; 0.5.23 L89–L180)."""
    big_tp = tp >= 4
    if rules == RULES_0_4_6:
        # 0.4.6.post5 L244–L306: only < 25,000 MiB cards get a graph cap; chunked 2048 there, else 8192.
        if gpu_mem_mib is not None and gpu_mem_mib < 25_000:
            return GpuTier(2048, 80 if big_tp else 8, "< 25,000 MiB")
        return GpuTier(8192, OLD_DEFAULT_CUDA_GRAPH_MAX_BS, ">= 25,000 MiB")
    if rules == RULES_0_5_2:
        # 0.5.2 L449–L527: chunked 2048 (< 35 GiB), 8192 (< 160 GiB), 16384; 4096 if unknown.
        if gpu_mem_mib is None:
            return GpuTier(4096, OLD_DEFAULT_CUDA_GRAPH_MAX_BS, "unknown")
        if gpu_mem_mib < 35 * 1024:
            graph = (80 if big_tp else 8) if gpu_mem_mib < 25_000 else OLD_DEFAULT_CUDA_GRAPH_MAX_BS
            return GpuTier(2048, graph, "< 35 GiB")
        if gpu_mem_mib < 160 * 1024:
            return GpuTier(8192, OLD_DEFAULT_CUDA_GRAPH_MAX_BS, "< 160 GiB")
        return GpuTier(16384, OLD_DEFAULT_CUDA_GRAPH_MAX_BS, ">= 160 GiB")
    if gpu_mem_mib is None:
        return GpuTier(4096, 160, "unknown")
    if gpu_mem_mib < 20 * 1024:
        return GpuTier(2048, 8, "< 20 GiB (T4, 4080)")
    if gpu_mem_mib < 35 * 1024:
        if rules == RULES_0_5_23:
            return GpuTier(4096, 160 if big_tp else 48, "< 35 GiB (A10, 4090, 5090; 0.5.23 values)")
        return GpuTier(2048, 80 if big_tp else 24, "< 35 GiB (A10, 4090, 5090)")
    if gpu_mem_mib < 60 * 1024:
        return GpuTier(4096, 160 if big_tp else 32, "< 60 GiB (A100-40G, L40)")
    if gpu_mem_mib < 90 * 1024:
        return GpuTier(8192, 512 if big_tp else 256, "< 90 GiB (H100, A100-80G)")
    if gpu_mem_mib < 160 * 1024:
        return GpuTier(8192, 512 if big_tp else 256, "< 160 GiB (H20, H200)")
    return GpuTier(16384, 512, ">= 160 GiB (B200, MI300)")


def decode_graph_batch_sizes(max_bs: int) -> tuple[int, ...]:
    """Decode capture sizes without speculative decoding (0.5.18 L5133–L5164)."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 497, 16), *range(512, max_bs + 1, 32)]
    clipped = [s for s in sizes if s <= max_bs]
    if max_bs >= 1 and (not clipped or clipped[-1] != max_bs):
        clipped.append(max_bs)
    return tuple(clipped)


def prefill_graph_buckets(max_bs: int) -> tuple[int, ...]:
    """Prefill token buckets (0.5.18 L5186–L5203): 42 for 2048, 50 for 4096, 58 for 8192, 74 for 16384."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return tuple(s for s in sizes if s <= max_bs)


def default_max_running_requests(
    tokens: int, context_len: int, rules: str, user_value: int | None = None, dp_size: int = 1
) -> int:
    """0.5.18 `resolve_max_num_reqs` L1873–L1926; 0.4.6 / 0.5.9 req pool size (+1 before 0.5.9)."""
    estimate = min(max(int(tokens / max(1, context_len) * 512), 2048), 4096)
    if rules in (RULES_0_4_6, RULES_0_5_2):
        estimate += 1
    cap = tokens // 2
    if user_value is not None:
        per_worker = user_value // max(1, dp_size)
        if rules in (RULES_0_4_6, RULES_0_5_2, RULES_0_5_9):
            return max(0, min(per_worker, estimate))
        return max(0, min(per_worker, cap))
    if rules in (RULES_0_4_6, RULES_0_5_2, RULES_0_5_9):
        return max(0, min(cap, estimate))
    return max(0, min(estimate, cap))


def gpu_mem_mib_for(gpu: GpuSpec, settings: ServeSettings) -> tuple[int | None, int]:
    """(SGLang's gpu_mem in MiB or None, the CUDA total in bytes) for this card and settings."""
    capacity = settings.gpu_memory_bytes or gpu.cuda_total_bytes
    smi = gpu.nvidia_smi_total_mib if gpu.nvidia_smi_total_mib > 0 else None
    if smi is not None and settings.gpu_memory_bytes and settings.gpu_memory_bytes != gpu.cuda_total_bytes:
        # --gpu-memory moves the CUDA total; keep the card's nvidia-smi − CUDA offset.
        smi = max(1, smi + round((settings.gpu_memory_bytes - gpu.cuda_total_bytes) / MiB))
    return smi, capacity
