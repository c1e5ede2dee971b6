"""Host (CPU RAM) KV tier sizing: SGLang HiCache and vLLM `--kv-offloading-size`, checked against the host.

SGLang HiCache (`python/sglang/srt/mem_cache/memory_pool_host.py` (SGLang v0.5.23); 0.5.18 `mem_cache/pool_host/base.py` L119–L170):
- `--hicache-size S` (decimal GB, **per rank**, wins when > 0): tokens = int(S × 1e9 // bytes_per_token);
  else tokens = int(device_pool_tokens × `--hicache-ratio`) (default 2.0; 1.2 in 0.5.23 buffer_only mode).
- page alignment adds one padding page: page_num = tokens // page_size + 1, tokens = page_num × page_size.
- bytes per token on the host = the device cell (per-rank KV heads for MHA; the full latent for MLA).
- the engine refuses when the request exceeds available host RAM − 10 GiB (`HICACHE_HOST_MEMORY_RESERVE_BYTES`);
  0.5.23 also divides the available RAM by the ranks on the host.
- it prints `Allocating kv hierarchical KV host pool: N tokens, X GB host memory.` (GB = 1e9).
- 0.5.23 auto-sizes when neither the ratio nor the size is given: ratio = min(default, 0.8 (fraction) ×
  host RAM per rank × 0.95 / device KV bytes) (`mem_cache/hicache_auto_size.py`).

vLLM (`vllm/v1/kv_offload/` (vLLM v0.33.0); `vllm/config/cache.py:383-392`, `v1/kv_offload/cpu/spec.py:97-147`):
- `--kv-offloading-size G` is GiB, **total across TP ranks**: cpu_bytes_to_use = G × 2^30.
- native OffloadingConnector: chunk = per-rank bytes per block × num_copies × blocks_per_chunk (1), where
  num_copies = world size, or 1 for pure-MLA (every rank's latent is identical and all share slot 0);
  num_chunks = cpu_bytes // round_up(chunk, 4096 (mmap.PAGESIZE)).
- SimpleCPUOffloadConnector (`VLLM_USE_SIMPLE_KV_OFFLOAD=1`): per rank = cpu_bytes // world size.
- `--kv-offloading-backend lmcache`: the LMCache server owns the capacity; the size is not propagated.

The host's RAM is a number the caller passes (`settings.host_memory_bytes`; the CLI reads /proc/meminfo
MemTotal when unset). Status: `fail` above the RAM (SGLang: above RAM − 10 GiB), `warning` above 80 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vramctl.core.engines import vllm_offload
from vramctl.core.engines.sglang.rules import hicache_rules
from vramctl.core.errors import BadInputError
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import GB, GiB, format_bytes, format_count

DEFAULT_HICACHE_RATIO = 2.0
BUFFER_ONLY_HICACHE_RATIO = 1.2
HICACHE_HOST_MEMORY_RESERVE_BYTES = 10 * GiB
"""`HICACHE_HOST_MEMORY_RESERVE_BYTES = 10*(1024**3)` (`python/sglang/srt/mem_cache/memory_pool_host.py` (SGLang v0.5.23))."""
HOST_WARNING_FRACTION = 0.80
DEFAULT_HOST_MEMORY_FRACTION = 0.8
"""`--hicache-host-memory-fraction` default (0.5.23); auto-sizing only."""
MMAP_PAGESIZE = 4096
VLLM_SIMPLE_DEFAULT_BYTES = 8 * GiB
"""SimpleCPUOffloadConnector DEFAULT_CPU_CAPACITY_BYTES (`vllm/v1/kv_offload/` (vLLM v0.33.0))."""

Mechanism = Literal["sglang-hicache", "vllm-native-offload", "vllm-simple-offload", "vllm-lmcache"]
Status = Literal["ok", "warning", "fail", "unknown"]


@dataclass(frozen=True)
class HostTierPlan:
    engine: Literal["vllm", "sglang"]
    mechanism: Mechanism
    flag: str
    """The flag and value that size it, as the user would type it."""
    device_tokens: int
    bytes_per_token: int
    """Host bytes per token per rank (equal to the device cell)."""
    host_tokens: int
    """Tokens the host tier holds (per rank; every rank holds the same token range)."""
    host_pool_tokens: int
    """Tokens actually allocated: SGLang adds one padding page; vLLM counts whole blocks."""
    pinned_bytes_per_rank: int
    ranks_on_host: int
    pinned_bytes_total: int
    """Pinned host RAM this server takes on the host (all ranks)."""
    host_memory_bytes: int | None
    fraction_of_host: float | None
    status: Status
    message: str
    ratio_to_device: float
    log_line: str = ""
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "mechanism": self.mechanism,
            "flag": self.flag,
            "device_tokens": self.device_tokens,
            "bytes_per_token": self.bytes_per_token,
            "host_tokens": self.host_tokens,
            "host_pool_tokens": self.host_pool_tokens,
            "pinned_bytes_per_rank": self.pinned_bytes_per_rank,
            "ranks_on_host": self.ranks_on_host,
            "pinned_bytes_total": self.pinned_bytes_total,
            "host_memory_bytes": self.host_memory_bytes,
            "fraction_of_host": None if self.fraction_of_host is None else round(self.fraction_of_host, 4),
            "ratio_to_device": round(self.ratio_to_device, 4),
            "status": self.status,
            "message": self.message,
            "log_line": self.log_line,
            "notes": list(self.notes),
        }


MAX_HOST_TIER_BYTES = 1 << 50
"""1 PiB: a host tier above it is a typo (and its token count overflows a float)."""
MAX_HICACHE_RATIO = 1000.0


def machine_memory_bytes() -> int | None:
    """This machine's RAM: MemTotal from /proc/meminfo (Linux); None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _host_status(
    total: int, host: int | None, reserve: int, what: str, flag: str
) -> tuple[Status, str, float | None]:
    if host is None:
        return "unknown", f"{what}: {format_bytes(total)} pinned; host RAM unknown (pass --host-memory)", None
    if host <= 0:
        raise BadInputError(f"--host-memory {host}: must be > 0")
    fraction = total / host
    usable = host - reserve
    if total > usable:
        limit = f"the host's {format_bytes(host)}" + (
            f" − {format_bytes(reserve)} reserve" if reserve else ""
        )
        return (
            "fail",
            (f"{what}: {format_bytes(total)} pinned exceeds {limit} ({fraction:.0%} of RAM): lower {flag}"),
            fraction,
        )
    if fraction > HOST_WARNING_FRACTION:
        return (
            "warning",
            (
                f"{what}: {format_bytes(total)} pinned is {fraction:.0%} of the host's {format_bytes(host)} "
                f"(> {HOST_WARNING_FRACTION:.0%}): little RAM is left for the rest of the box; consider lowering {flag}"
            ),
            fraction,
        )
    return (
        "ok",
        f"{what}: {format_bytes(total)} pinned, {fraction:.0%} of the host's {format_bytes(host)}",
        fraction,
    )


def plan_hicache(
    model: ModelSpec,
    settings: ServeSettings,
    *,
    device_kv_tokens: int,
    kv_bytes_per_token: int,
    page_size: int = 1,
    version: str | None = None,
    buffer_only: bool = False,
    ranks_on_host: int | None = None,
    host_memory_fraction: float = DEFAULT_HOST_MEMORY_FRACTION,
) -> HostTierPlan:
    """SGLang HiCache host pool per rank, and what all ranks on the host pin together."""
    _check_inputs(device_kv_tokens, kv_bytes_per_token, page_size)
    rules = hicache_rules(version)
    ranks = ranks_on_host or settings.world_size
    notes: list[str] = []
    size_gb = settings.hicache_size_gb or 0.0
    if size_gb < 0:
        raise BadInputError(f"--hicache-size {size_gb}: must be ≥ 0 (decimal GB per rank)")
    if size_gb * GB > MAX_HOST_TIER_BYTES:
        raise BadInputError(
            f"--hicache-size {size_gb:g}: absurdly large (at most {MAX_HOST_TIER_BYTES // GB:,} GB)"
        )
    if size_gb > 0:
        tokens = int(size_gb * GB // kv_bytes_per_token)
        ratio = tokens / device_kv_tokens if device_kv_tokens else 0.0
        flag = f"--hicache-size {size_gb:g}"
        notes.append(f"--hicache-size is decimal GB per rank: {size_gb:g} GB × {ranks} ranks on this host")
    else:
        default = BUFFER_ONLY_HICACHE_RATIO if buffer_only and rules.buffer_only_ratio else DEFAULT_HICACHE_RATIO
        ratio = settings.hicache_ratio if settings.hicache_ratio is not None else default
        if ratio <= 0:
            raise BadInputError(f"--hicache-ratio {ratio}: must be > 0")
        if ratio > MAX_HICACHE_RATIO:
            raise BadInputError(f"--hicache-ratio {ratio:g}: absurdly large (at most {MAX_HICACHE_RATIO:g})")
        flag = f"--hicache-ratio {ratio:g}"
        device_bytes = device_kv_tokens * kv_bytes_per_token
        if (
            settings.hicache_ratio is None
            and rules.auto_size
            and settings.host_memory_bytes is not None
            and device_bytes > 0
        ):
            # 0.5.23 hicache_auto_size.py: ratio = min(default, fraction × budget × 0.95 / device KV bytes),
            # budget = the host's RAM per rank on this host (the engine reads available RAM, bounded by cgroups).
            per_rank_budget = settings.host_memory_bytes / ranks
            auto = host_memory_fraction * per_rank_budget * 0.95 / device_bytes
            if auto <= 0:
                raise BadInputError(
                    "HiCache auto-sizing: no host memory for a host pool; pass --hicache-ratio"
                )
            if auto < ratio:
                auto_log = (
                    f"HiCache auto-sizing: ratio {ratio:.3f} -> {auto:.3f}; {per_rank_budget / GiB:.1f} GiB host "
                    f"memory per rank (fraction {host_memory_fraction:.2f}, {ranks} ranks on this host), host pools "
                    f"{auto * device_bytes / GiB:.1f} GiB."
                )
                notes.append(auto_log)
                ratio = auto
                flag = f"--hicache-host-memory-fraction {host_memory_fraction:g} (auto ratio {ratio:.3f})"
        tokens = int(device_kv_tokens * ratio)
    page_num = tokens // page_size + 1
    pool_tokens = page_num * page_size
    per_rank = pool_tokens * kv_bytes_per_token
    total = per_rank * ranks
    if rules.pool_log_has_tokens:
        log = f"Allocating kv hierarchical KV host pool: {pool_tokens} tokens, {per_rank / GB:.2f} GB host memory."
    else:
        log = f"Allocating {per_rank / GB:.2f} GB host memory for hierarchical KV cache."
    if pool_tokens < device_kv_tokens:
        if rules.small_host_pool_warns:
            notes.append(
                f"HiCache kv host pool ({pool_tokens} tokens) is smaller than the device pool ({device_kv_tokens} "
                "tokens): L2 cache effectiveness is reduced (SGLang warns)"
            )
        else:
            notes.append("before 0.5.18 SGLang asserts the host pool is larger than the device pool")
    if model.mla is not None:
        notes.append(
            "MLA: every rank holds the full latent on the host too (only one rank writes back to L3)"
        )
    status, message, fraction = _host_status(
        total,
        settings.host_memory_bytes,
        HICACHE_HOST_MEMORY_RESERVE_BYTES,
        f"HiCache host pool {format_count(pool_tokens)} tokens × {ranks} rank(s)",
        flag,
    )
    if status == "fail" and settings.host_memory_bytes is not None:
        available = settings.host_memory_bytes - HICACHE_HOST_MEMORY_RESERVE_BYTES
        if rules.available_per_rank:
            available //= max(1, ranks)
        message += (
            f". SGLang: Not enough host memory available. Requesting {per_rank / GB:.2f} GB but only have "
            f"{max(0, available) / GB:.2f} GB free. Please reduce the size of the hierarchical cache."
        )
    return HostTierPlan(
        engine="sglang",
        mechanism="sglang-hicache",
        flag=flag,
        device_tokens=device_kv_tokens,
        bytes_per_token=kv_bytes_per_token,
        host_tokens=tokens,
        host_pool_tokens=pool_tokens,
        pinned_bytes_per_rank=per_rank,
        ranks_on_host=ranks,
        pinned_bytes_total=total,
        host_memory_bytes=settings.host_memory_bytes,
        fraction_of_host=fraction,
        status=status,
        message=message,
        ratio_to_device=ratio,
        log_line=log,
        notes=tuple(notes),
    )


def plan_vllm_offload(
    model: ModelSpec,
    settings: ServeSettings,
    *,
    device_kv_tokens: int,
    kv_bytes_per_token: int,
    backend: Literal["native", "lmcache"] = "native",
    simple: bool = False,
    blocks_per_chunk: int = 1,
    ranks_on_host: int | None = None,
) -> HostTierPlan | None:
    """vLLM `--kv-offloading-size` (GiB, total across TP) as the native or simple connector sizes it."""
    if settings.kv_offloading_size_gib is None:
        return None
    _check_inputs(device_kv_tokens, kv_bytes_per_token, 1)
    size_gib = settings.kv_offloading_size_gib
    if size_gib <= 0:
        raise BadInputError(f"--kv-offloading-size {size_gib}: must be > 0 (GiB, total across TP ranks)")
    if size_gib * GiB > MAX_HOST_TIER_BYTES:
        raise BadInputError(
            f"--kv-offloading-size {size_gib:g}: absurdly large (at most {MAX_HOST_TIER_BYTES // GiB:,} GiB)"
        )
    if blocks_per_chunk < 1:
        raise BadInputError(f"blocks_per_chunk {blocks_per_chunk}: must be ≥ 1")
    flag = f"--kv-offloading-size {size_gib:g}"
    cpu_bytes = int(size_gib * GiB)
    world = settings.world_size
    ranks = ranks_on_host or world
    block_size = settings.block_size or 16
    per_block = kv_bytes_per_token * block_size
    notes: list[str] = ["CPU offload does not shrink the GPU budget; it only adds a CPU tier (`vllm/v1/kv_offload/` (vLLM v0.33.0))"]
    if backend == "lmcache":
        return HostTierPlan(
            engine="vllm",
            mechanism="vllm-lmcache",
            flag=flag + " --kv-offloading-backend lmcache",
            device_tokens=device_kv_tokens,
            bytes_per_token=kv_bytes_per_token,
            host_tokens=0,
            host_pool_tokens=0,
            pinned_bytes_per_rank=0,
            ranks_on_host=ranks,
            pinned_bytes_total=0,
            host_memory_bytes=settings.host_memory_bytes,
            fraction_of_host=None,
            status="unknown",
            message="LMCache manages its own capacity: --kv-offloading-size is not propagated to it",
            ratio_to_device=0.0,
            notes=tuple(notes),
        )
    if simple:
        per_rank = cpu_bytes // world
        host_blocks = per_rank // per_block
        host_tokens = host_blocks * block_size
        pinned_rank = host_blocks * per_block
        total = pinned_rank * ranks
        mechanism: Mechanism = "vllm-simple-offload"
        notes.append(
            "SimpleCPUOffloadConnector: cpu_bytes_to_use // world_size per rank; needs prefix caching"
        )
    else:
        replicated = model.mla is not None and world == settings.tensor_parallel_size and world <= 8
        copies = 1 if replicated else world
        chunk = per_block * copies * blocks_per_chunk
        rounded = -(-chunk // MMAP_PAGESIZE) * MMAP_PAGESIZE
        num_chunks = cpu_bytes // rounded
        host_blocks = num_chunks * blocks_per_chunk
        host_tokens = host_blocks * block_size
        region = num_chunks * rounded
        pinned_rank = region // copies if not replicated else region
        total = region if ranks == world else pinned_rank * ranks
        mechanism = "vllm-native-offload"
        if replicated and world > 1:
            notes.append(
                f"pure MLA: all {world} ranks share one copy (slot 0), so the host holds the latent once"
            )
        notes.extend(vllm_offload.host_notes(settings, region_bytes=region, per_rank_bytes=pinned_rank))
    status, message, fraction = _host_status(
        total,
        settings.host_memory_bytes,
        0,
        f"vLLM CPU offload {format_count(host_tokens)} tokens",
        flag,
    )
    return HostTierPlan(
        engine="vllm",
        mechanism=mechanism,
        flag=flag,
        device_tokens=device_kv_tokens,
        bytes_per_token=kv_bytes_per_token,
        host_tokens=host_tokens,
        host_pool_tokens=host_tokens,
        pinned_bytes_per_rank=pinned_rank,
        ranks_on_host=ranks,
        pinned_bytes_total=total,
        host_memory_bytes=settings.host_memory_bytes,
        fraction_of_host=fraction,
        status=status,
        message=message,
        ratio_to_device=host_tokens / device_kv_tokens if device_kv_tokens else 0.0,
        notes=tuple(notes),
    )


def plan_host_tier(
    model: ModelSpec,
    gpu: GpuSpec,
    settings: ServeSettings,
    *,
    device_kv_tokens: int,
    kv_bytes_per_token: int,
    engine: Literal["vllm", "sglang"] | None = None,
    page_size: int = 1,
    version: str | None = None,
) -> HostTierPlan | None:
    """The host tier the settings ask for, or None when none is configured.

    SGLang: `enable_hierarchical_cache`, or a `hicache_ratio` / `hicache_size_gb`. vLLM: `kv_offloading_size_gib`.
    `engine` picks one when settings.engine is `both` (default: SGLang if HiCache is configured).
    `gpu` is accepted for symmetry with plan(); the host tier does not depend on the card.
    """
    del gpu
    chosen = engine or (settings.engine if settings.engine != "both" else None)
    hicache = (
        settings.enable_hierarchical_cache
        or bool(settings.hicache_size_gb)
        or (settings.hicache_ratio is not None)
    )
    if chosen is None:
        chosen = "sglang" if hicache else "vllm"
    if chosen == "sglang":
        if not hicache:
            return None
        sglang_version = version or (settings.engine_version if settings.engine == "sglang" else None)
        return plan_hicache(
            model,
            settings,
            device_kv_tokens=device_kv_tokens,
            kv_bytes_per_token=kv_bytes_per_token,
            page_size=page_size,
            version=sglang_version,
        )
    return plan_vllm_offload(
        model,
        settings,
        device_kv_tokens=device_kv_tokens,
        kv_bytes_per_token=kv_bytes_per_token,
        backend="lmcache" if (settings.kv_offloading_backend or "").lower() == "lmcache" else "native",
    )


def _check_inputs(device_tokens: int, bytes_per_token: int, page_size: int) -> None:
    if device_tokens < 0:
        raise BadInputError(f"device KV tokens {device_tokens}: must be ≥ 0")
    if bytes_per_token <= 0:
        raise BadInputError(f"KV bytes per token {bytes_per_token}: must be > 0")
    if page_size < 1:
        raise BadInputError(f"--page-size {page_size}: must be ≥ 1")
