"""Native KV offload's host memory (`--kv-offloading-size`, `--kv-offloading-backend native`), by vLLM version.

`--kv-offloading-size G` becomes `kv_connector_extra_config["cpu_bytes_to_use"] = G × 2^30`
(`vllm/config/vllm.py:1157-1179`, vLLM 0.33.0; the same in 0.26 – 0.32). `CPUOffloadingSpec` sizes
num_chunks = cpu_bytes_to_use // round_up(per-rank bytes per block × copies × blocks_per_chunk, PAGESIZE)
(`vllm/v1/kv_offload/cpu/spec.py:97-131`, 0.33.0), so the host buffer is at most cpu_bytes_to_use. Where it lives:

- **≤ 0.26** (`spec.py:135-140`, 0.26.0): each rank allocates private `torch.zeros(..., pin_memory=True)` tensors
  (`cpu/gpu_worker.py:486-506`), through PyTorch's pinned CachingHostAllocator, which can round an allocation up
  to a power of two (vLLM PR #50094 measured 6 → 8, 10 → 16 and 80 → 128 GiB per worker).
- **0.28 →** (PR #50094; `spec.py:149-178` in 0.28.0, `:183-216` in 0.33.0): one `SharedOffloadRegion` per
  engine, a file `/dev/shm/vllm_offload_{engine_id}.mmap` (split into up to 32 files of ≥ 1 GiB in 0.33) of
  num_chunks × aligned chunk bytes, mapped by every rank, each rank pinning its slice (cudaHostRegister,
  `cpu/host_register.py` from 0.32). The creator checks the space first
  (`check_shm_free_space`, "Insufficient space in /dev/shm"), logs `Created mmap file … (%.2f GB)` in decimal GB,
  and (0.29 →, a barrier over the workers) unlinks the path once every worker mapped it: the memory is `Shmem`
  until the engine exits.
  Data parallelism: every DP engine has its own engine_id, so its own region.

The claim "reported near 1.92 × --kv-offloading-size as shared memory" (vLLM issue #53042) was measured on 0.26.0,
whose buffers were the private pinned tensors above, on one hybrid model (4 KV-cache groups); nothing in the 0.28 –
0.33 sources allocates more than cpu_bytes_to_use per engine, so vramctl reports the region (≤ 1.00 ×) there and
the requested bytes with a rounding warning before 0.28.
"""

from __future__ import annotations

from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.errors import BadInputError
from vramctl.core.settings import LATEST_VLLM_VERSION, ServeSettings
from vramctl.core.units import GB, GiB

CITATION = (
    "vllm/v1/kv_offload/cpu/spec.py (0.26.0: lines 135-140, private pinned tensors; 0.28.0 →: SharedOffloadRegion "
    "in /dev/shm, cpu/shared_offload_region.py)"
)


def next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length() if n > 0 else 0


def host_notes(settings: ServeSettings, *, region_bytes: int, per_rank_bytes: int) -> list[str]:
    """Notes for the native connector's host tier at the settings' vLLM version."""
    version = settings.engine_version or LATEST_VLLM_VERSION
    try:
        rules = rules_for(version)
    except (ValueError, BadInputError):
        return []
    dp = settings.data_parallel_size
    if rules.offload_shared_region:
        out = [
            f"vLLM {version}: one shared region /dev/shm/vllm_offload_<engine_id>.mmap of {region_bytes / GiB:.2f} GiB "
            f"(the log's `Created mmap file … ({region_bytes / GB:.2f} GB)`), at most --kv-offloading-size × 2^30 "
            "bytes: /dev/shm (the container's --shm-size) must hold it"
            + (
                f", once per data-parallel engine ({dp} × {region_bytes / GiB:.2f} GiB = "
                f"{dp * region_bytes / GiB:.2f} GiB)"
                if dp > 1
                else ""
            )
            + f"; it counts as Shmem, not as the process's anonymous memory ({CITATION})."
        ]
        if rules.offload_region_unlinked:
            out.append(
                "The region's path is unlinked once every worker has mapped it (0.29 →): ls /dev/shm does not show "
                "it, `free`'s shared column does."
            )
        return out
    rounded = next_power_of_two(per_rank_bytes)
    out = [
        f"vLLM {version}: each rank pins private torch tensors (no /dev/shm region before 0.28, PR #50094); PyTorch's "
        f"pinned host allocator can round an allocation up to a power of two: up to {rounded / GiB:.2f} GiB per rank "
        f"for {per_rank_bytes / GiB:.2f} GiB ({CITATION})."
    ]
    return out
