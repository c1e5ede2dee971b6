"""Fixes for a log whose settings fix the KV cache size: that size is the flag to change, not the utilisation.

With `--kv-cache-memory-bytes` (or, on the CPU backend, `VLLM_CPU_KVCACHE_SPACE`, which the platform turns into
the same setting and which wins over the flag: `vllm/platforms/cpu.py`, `check_and_update_config`, vLLM 0.32)
the worker sizes the KV cache from that number alone and skips memory profiling: the GPU worker "does not
respect the gpu_memory_utilization config" (`vllm/v1/worker/gpu_worker.py`, `determine_available_memory`, vLLM
0.11 - 0.33) and the CPU worker allocates exactly that (`vllm/v1/worker/cpu_worker.py`, vLLM 0.32). A KV budget
failure (`no-kv-cache-memory`, `kv-cache-too-small-for-max-model-len`, `kv-pool-overcommit`) is then fixed by
that size, and a fix that moves `--gpu-memory-utilization` changes nothing (the engine fails the same way).
The start-up free-memory check of the GPU worker (`request_memory`) still compares the utilisation with the free
memory, so `gpu-util-exceeds-free-memory` keeps its utilisation fix.

The size to set: enough KV for one request of `max_model_len` tokens (one block more than the request's
blocks: the block pool keeps a null block), from `vramctl plan` on the deployment the log describes (the model
named by a local path or known to the registry), rounded up to a whole MiB; without a plan, from the failing
message's own "X GiB KV cache is needed" (rounded up by the message's 0.01 GiB); else no value, with the way to
size it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vramctl.core.units import GiB, MiB

__all__ = ["EXPLICIT_KV_LABELS", "KV_SIZE_FLAGS", "ExplicitKvFix", "explicit_kv_fix", "sets_kv_size"]

KV_FLAG = "--kv-cache-memory-bytes"
CPU_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"
KV_SIZE_FLAGS = frozenset({KV_FLAG, CPU_SPACE_ENV})
EXPLICIT_KV_LABELS = frozenset({"no-kv-cache-memory", "kv-cache-too-small-for-max-model-len", "kv-pool-overcommit"})
_DOWN = frozenset({"kv-pool-overcommit"})
_POOL_HEADROOM_BYTES = 256 * MiB
"""Left free beside a smaller KV pool that could not be allocated (the allocator's rounding, the next buffers)."""

_PLATFORM_BLOCK_SIZES = (16, 128, 256)

DO_NOT = (
    "Do not change --gpu-memory-utilization for this: with an explicit KV size ({where}) the engine sizes the KV "
    "cache from that number and ignores the utilisation."
)


@dataclass(frozen=True, slots=True)
class ExplicitKvFix:
    action: str
    flag: str
    value: str | None
    reason: str
    do_not: str


def sets_kv_size(facts: Mapping[str, Any]) -> bool:
    """The log sets the KV size: the flag or the CPU space in its settings, or a KV check that names the size asked
    for (the CPU worker's explicit mode)."""
    return any(
        isinstance(facts.get(name), (int, float)) and facts[name] > 0
        for name in ("kv_cache_memory_bytes", "vllm_cpu_kvcache_space", "kv_requested_bytes")
    )


def _round_up_mib(value: float) -> int:
    return math.ceil(value / MiB) * MiB


def _planned_need(source: object, facts: Mapping[str, Any]) -> tuple[int, str] | None:
    """(bytes, how) of KV for one max_model_len request of the deployment the log describes, or None."""
    if not isinstance(source, (str, os.PathLike)) or str(source) == "-" or not os.path.isfile(source):
        return None
    from vramctl.diagnose.planfix import MAX_PLAN_LOG_BYTES, deployment, fits

    if os.path.getsize(source) > MAX_PLAN_LOG_BYTES:
        return None
    total = facts.get("total_bytes")
    try:
        # the device size does not enter the KV arithmetic of an explicit KV size: any size plans it
        found = deployment(str(source), total if isinstance(total, int) else 80 * GiB)
    except Exception:  # the reconstruction is an extra: a log it cannot read gives no value
        return None
    if found is None:
        return None
    model, _gpu, settings, name = found
    if getattr(settings, "engine", "vllm") != "vllm":
        return None
    # the block size the platform chooses when the log sets none (16 on GPUs, 128 on CPUs, 256 for some
    # attention backends) changes the round-up: the largest need of those
    sizes = (settings.block_size,) if getattr(settings, "block_size", None) else (None, *_PLATFORM_BLOCK_SIZES)
    result = None
    need = 0
    for size in sizes:
        r = fits(model, _gpu, settings if size is None else settings.with_changes(block_size=size))
        if r is None or not r.bytes_per_block or not r.blocks_per_request:
            continue
        blocks_need = (int(r.blocks_per_request) + 1) * int(r.bytes_per_block)
        if result is None or blocks_need > need:
            result, need = r, blocks_need
    if result is None:
        return None
    need = _round_up_mib(need)
    # check it with the planner: the largest length that fits must reach max_model_len (grow a few times if not)
    for _ in range(4):
        checked = fits(model, _gpu, settings.with_changes(kv_cache_memory_bytes=need))
        if checked is not None and checked.num_blocks > 0 and checked.max_model_len_fit >= checked.max_model_len:
            how = (
                f"checked with plan: {name}, {int(checked.max_model_len):,} tokens need "
                f"{int(result.blocks_per_request)} blocks of {int(result.block_size)} tokens "
                f"({int(result.bytes_per_block):,} bytes), plus one (the block pool's null block)"
            )
            return need, how
        need *= 2
    return None


def explicit_kv_fix(
    cause: str, engine: str | None, facts: Mapping[str, Any], source: object
) -> ExplicitKvFix | None:
    """The fix of the KV size for a KV budget failure of a log that set the size, or None (size not set)."""
    if cause not in EXPLICIT_KV_LABELS or engine not in (None, "vllm"):
        return None
    kv = facts.get("kv_cache_memory_bytes")
    space = facts.get("vllm_cpu_kvcache_space")
    if isinstance(kv, (int, float)) and kv > 0:
        flag, where, now = KV_FLAG, f"--kv-cache-memory-bytes {int(kv):,}", int(kv)
    elif isinstance(space, (int, float)) and space > 0:
        flag, where, now = CPU_SPACE_ENV, f"{CPU_SPACE_ENV}={space:g} GiB", int(space * GiB)
    else:
        return None
    do_not = DO_NOT.format(where=where)

    if cause in _DOWN:
        requested, free = facts.get("requested_bytes"), facts.get("free_bytes")
        value: int | None = None
        if isinstance(requested, (int, float)) and isinstance(free, (int, float)):
            smaller = (now - max(0, int(requested) - int(free)) - _POOL_HEADROOM_BYTES) // MiB * MiB
            value = smaller if smaller > 0 else None
        return _fix(
            "LOWER the explicit KV size so the pool fits in what is free",
            flag,
            value,
            f"the KV pool of {now / GiB:.2f} GiB could not be allocated"
            + (f": {int(free) / GiB:.2f} GiB was free" if isinstance(free, (int, float)) else ""),
            do_not,
        )

    planned = _planned_need(source, facts)
    if planned is not None:
        need, how = planned
    else:
        needed = facts.get("kv_needed_bytes")
        if not isinstance(needed, (int, float)) or needed <= 0:
            return _fix(
                "RAISE the explicit KV size to hold one max_model_len request "
                "(`vramctl plan` gives the bytes per block)",
                flag,
                None,
                f"{where} leaves no room for the KV cache",
                do_not,
            )
        need = _round_up_mib(float(needed) + 0.01 * GiB)  # the message rounds to 0.01 GiB
        how = f"the engine says {float(needed) / GiB:.2f} GiB of KV is needed"
    if need <= now:
        return None
    return _fix("RAISE the explicit KV size to hold one max_model_len request", flag, need, how, do_not)


def _fix(action: str, flag: str, value: int | None, reason: str, do_not: str) -> ExplicitKvFix:
    if value is None:
        return ExplicitKvFix(action, flag, None, reason, do_not)
    if flag == CPU_SPACE_ENV:  # whole GiB
        gib = max(1, math.ceil(value / GiB)) if "RAISE" in action else value // GiB
        if gib < 1:
            return ExplicitKvFix(action, KV_FLAG, str(value), reason, do_not)
        return ExplicitKvFix(action, flag, str(gib), f"{reason} ({value:,} bytes)", do_not)
    return ExplicitKvFix(action, flag, str(value), f"{reason} ({value / MiB:,.0f} MiB)", do_not)
