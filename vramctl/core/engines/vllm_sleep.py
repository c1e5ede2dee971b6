"""vLLM sleep mode (`--enable-sleep-mode`): what start-up allocates differently and what `/sleep` frees.

Start-up (`vllm/config/model.py:663-673`, vLLM 0.33.0): sleep mode switches on the CuMemAllocator
(`enable_cumem_allocator`); the worker allocates the weights (tag `weights`), the KV cache (`kv_cache`), the KV-init
state (`runtime`, 0.32 →) and the scratch workspace (`workspace`, 0.33) inside its pool
(`vllm/v1/worker/gpu_worker.py:392-417`, `:563`, `:596`, `:898-909`). Inside the pool `expandable_segments` is
switched off (`vllm/device_allocator/cumem.py:384-395`) and every allocation is a cuMemCreate mapping. The
budget is unchanged from 0.28 on: the subtraction is a free-memory drop since the init snapshot, which sees the
pool's mappings (the reason it replaced torch's counters, vLLM issue #37096). vramctl therefore moves no ledger term
at start-up; it reports what a sleep would free.

Sleep (`CuMemBackend.suspend`, `vllm/device_allocator/sleep_mode_backend.py:119-125` in 0.29/0.30, `:128-137` in
0.32/0.33; `CuMemAllocator.sleep`, `cumem.py:233-298`): allocations whose tag is offloaded are copied to pinned
host memory (`pin_memory=PIN_MEMORY`), every other one is unmapped and lost.

- level 1: `weights` offloaded to the host; the KV cache discarded.
- level 2: the weights discarded too (reloaded on wake); model buffers are copied to the CPU first
  (`gpu_worker.py:305-315`); the KV cache discarded.
- 0.32 →: the `runtime` and `cudagraph` tags are offloaded at both levels. The CUDA-graph pool is in the CuMem
  pool only with `--sleep-mode-offload-cudagraph` (`vllm/config/vllm.py:715-727`); otherwise it stays on the card.
- `--enable-nccl-comm-suspend` (0.30 →, `vllm/config/model.py:387`): ncclCommSuspend frees the communicators'
  memory too; without it the NCCL buffers (allocated outside the pool) stay.
- `/release_kv_cache_memory` (0.31 →, `vllm/entrypoints/serve/dev/sleep/api_router.py:37-41`,
  `vllm/v1/engine/core.py:1058-1077` in 0.33): discards the KV pool only, on a paused, awake engine.
- The worker logs `Sleep mode freed %s GiB memory, %s GiB memory is still in use.` (`gpu_worker.py:335-339`) and
  asserts "Memory usage increased after sleeping.".
- `--load-format ipc_cache` zero-copy weights are not in the pool: "sleep mode … must not be used with this loader"
  (`weight_cache/ipc_loader.py`, class docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GiB

CITATION = (
    "vllm/device_allocator/sleep_mode_backend.py CuMemBackend.suspend (0.30.0: line 125; 0.33.0: lines 128-137); "
    "vllm/device_allocator/cumem.py:233-298 (0.33.0)"
)


@dataclass(frozen=True)
class SleepPlan:
    """Per rank of the binding stage, from the plan's ledger."""

    version: str
    weights_bytes: int
    kv_cache_bytes: int
    cuda_graph_bytes: int
    nccl_bytes: int
    resident_bytes: int
    """What the engine holds on the card awake and idle (every term but other processes, the transient activation
    peak and slack)."""
    nccl_suspend: bool
    offload_cudagraph: bool
    release_kv_endpoint: bool

    @property
    def level1_freed_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self._graphs_freed + self._nccl_freed

    @property
    def level1_host_bytes(self) -> int:
        """Pinned host memory a level-1 sleep takes per rank: the weights (and the graph pool when offloaded)."""
        return self.weights_bytes + self._graphs_freed

    @property
    def level2_freed_bytes(self) -> int:
        return self.level1_freed_bytes

    @property
    def level2_host_bytes(self) -> int:
        return self._graphs_freed

    @property
    def remains_bytes(self) -> int:
        return max(0, self.resident_bytes - self.level1_freed_bytes)

    @property
    def _graphs_freed(self) -> int:
        return self.cuda_graph_bytes if self.offload_cudagraph else 0

    @property
    def _nccl_freed(self) -> int:
        return self.nccl_bytes if self.nccl_suspend else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "level1": {"freed_bytes": self.level1_freed_bytes, "host_pinned_bytes": self.level1_host_bytes},
            "level2": {"freed_bytes": self.level2_freed_bytes, "host_pinned_bytes": self.level2_host_bytes},
            "remains_bytes": self.remains_bytes,
            "nccl_comm_suspend": self.nccl_suspend,
            "offload_cudagraph": self.offload_cudagraph,
            "release_kv_cache_memory": self.release_kv_endpoint,
            "citation": CITATION,
        }


def check(settings: ServeSettings, version: str) -> None:
    """Flags a version does not have are refused as vLLM refuses an unknown argument."""
    from vramctl.core.errors import BadInputError

    rules = rules_for(version)
    if settings.enable_nccl_comm_suspend and not rules.sleep_nccl_suspend:
        raise BadInputError(
            f"--enable-nccl-comm-suspend: vLLM {version} has no such flag (added in 0.30.0, vllm/config/model.py)"
        )
    if settings.sleep_mode_offload_cudagraph and not rules.sleep_runtime_offload:
        raise BadInputError(
            f"--sleep-mode-offload-cudagraph: vLLM {version} has no such flag (added in 0.32.0, vllm/config/model.py)"
        )


def plan_sleep(
    settings: ServeSettings,
    version: str,
    *,
    weights_bytes: int,
    kv_cache_bytes: int,
    cuda_graph_bytes: int,
    nccl_bytes: int,
    resident_bytes: int,
) -> SleepPlan | None:
    if not settings.enable_sleep_mode:
        return None
    rules = rules_for(version)
    return SleepPlan(
        version=version,
        weights_bytes=weights_bytes,
        kv_cache_bytes=kv_cache_bytes,
        cuda_graph_bytes=cuda_graph_bytes,
        nccl_bytes=nccl_bytes,
        resident_bytes=resident_bytes,
        nccl_suspend=settings.enable_nccl_comm_suspend and rules.sleep_nccl_suspend,
        offload_cudagraph=settings.sleep_mode_offload_cudagraph and rules.sleep_runtime_offload,
        release_kv_endpoint=rules.release_kv_endpoint,
    )


def notes(sp: SleepPlan, *, ranks: int, host_memory_bytes: int | None) -> tuple[list[str], list[str]]:
    """(notes, warnings) for the plan."""
    g = GiB
    out = [
        "--enable-sleep-mode: the weights and the KV pool are allocated in vLLM's CuMemAllocator pool (expandable "
        "segments off inside it); the budget is unchanged, no term moves at start-up (the ≥ 0.28 subtraction is a "
        "free-memory drop, which sees the pool).",
        f"/sleep?level=1 frees about {sp.level1_freed_bytes / g:.2f} GiB per rank (weights {sp.weights_bytes / g:.2f} "
        f"GiB offloaded to pinned host memory, KV {sp.kv_cache_bytes / g:.2f} GiB discarded); level=2 frees the same "
        "but discards the weights too (reloaded on wake, only the model buffers go to the CPU). About "
        f"{sp.remains_bytes / g:.2f} GiB stays in use: the CUDA context, cuBLAS and other non-torch memory, NCCL"
        + ("" if sp.nccl_suspend else " (--enable-nccl-comm-suspend frees the communicators, 0.30 →)")
        + ("" if sp.offload_cudagraph else ", the CUDA-graph pool (--sleep-mode-offload-cudagraph, 0.32 →)")
        + f" ({CITATION}).",
    ]
    if sp.release_kv_endpoint:
        out.append(
            f"vLLM {sp.version} has POST /release_kv_cache_memory (0.31 →): on a paused engine it discards the KV pool "
            f"only ({sp.kv_cache_bytes / g:.2f} GiB per rank) and keeps the weights resident."
        )
    warnings: list[str] = []
    host = sp.level1_host_bytes * ranks
    if host_memory_bytes is not None and host > 0.8 * host_memory_bytes:
        warnings.append(
            f"A level-1 sleep pins {host / g:.2f} GiB of host memory ({ranks} rank(s) × "
            f"{sp.level1_host_bytes / g:.2f} GiB), over 80 % of the host's {host_memory_bytes / g:.2f} GiB: use "
            "level 2 or free host memory."
        )
    return out, warnings
