"""Device backends behind one snapshot interface: `cuda` (torch + NVML) and `cpu` (process RSS).

A `Snapshot` holds the same fields as vLLM's `MemorySnapshot` (`vllm/utils/mem_utils.py` (vLLM v0.33.0),
`vllm/utils/mem_utils.py:104-194`, vLLM 0.33.0): free and total memory of the device, torch's allocated /
peak-allocated / reserved bytes, and non-torch = used − reserved (which, as in vLLM, includes other
processes, the CUDA context, NCCL and cuBLAS).

The `cpu` backend is a real measurement of this process on the host, so the whole profile / suggest /
validate pipeline runs in CI:
- free = MemAvailable (or, under a cgroup memory limit, limit − usage, whichever is smaller);
- total = MemTotal, or the cgroup v2 / v1 limit when one is set;
- the process's resident set (VmRSS) and its high-water mark (VmHWM) from /proc/self/status; the mark is
  reset by writing "5" to /proc/self/clear_refs (Linux ≥ 4.0), the CPU analogue of
  `torch.cuda.reset_peak_memory_stats`;
- torch keeps no allocation statistics for CPU tensors, so "torch allocated" is the RSS and "torch peak"
  is the high-water mark: every CPU term is an RSS delta, not a caching-allocator counter.
- `capacity_bytes` emulates a device of that size: total = capacity, used = the RSS this process gained
  since the backend was opened, free = min(capacity − used, MemAvailable). This keeps a CPU profile
  independent of what other processes on a shared host do, and keeps `validate` from touching more
  host memory than asked for.
- Without `--device-memory` the host is shared (other processes come and go), so the device is
  HOST_HEADROOM_FRACTION of the memory available when it is opened: one rule for `profile`, `suggest` and
  `validate`, and the same bound every cpu allocation is checked against (vramctl.measure.model). A pool a cpu
  profile sizes is therefore one `validate` on the same host accepts.

Nothing here imports torch at module import time; the CUDA backend imports it when it is opened.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from vramctl.core.errors import BadInputError, NoDeviceError
from vramctl.core.interrupts import raise_if_pending

_PROC_STATUS = Path("/proc/self/status")
_PROC_CLEAR_REFS = Path("/proc/self/clear_refs")
_PROC_MEMINFO = Path("/proc/meminfo")
_CGROUP_V2_MAX = Path("/sys/fs/cgroup/memory.max")
_CGROUP_V2_CURRENT = Path("/sys/fs/cgroup/memory.current")
_CGROUP_V1_LIMIT = Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")
_CGROUP_V1_USAGE = Path("/sys/fs/cgroup/memory/memory.usage_in_bytes")
# cgroup v1 reports "no limit" as a huge page-aligned number (2**63 rounded down to a page).
_CGROUP_NO_LIMIT = 1 << 60


@dataclass(frozen=True)
class Snapshot:
    """One reading of the device's memory, in bytes (vLLM `MemorySnapshot`)."""

    free_bytes: int
    total_bytes: int
    torch_allocated_bytes: int
    torch_peak_bytes: int
    torch_reserved_bytes: int
    process_bytes: int
    """What this process holds on the device: CPU RSS; on CUDA the NVML per-process figure, else reserved."""
    timestamp: float

    @property
    def used_bytes(self) -> int:
        """total − free: every process on the device (vLLM `cuda_memory`)."""
        return self.total_bytes - self.free_bytes

    @property
    def non_torch_bytes(self) -> int:
        """used − reserved (vLLM `non_torch_memory`): context, NCCL, cuBLAS, other processes."""
        return self.used_bytes - self.torch_reserved_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes,
            "torch_allocated_bytes": self.torch_allocated_bytes,
            "torch_peak_bytes": self.torch_peak_bytes,
            "torch_reserved_bytes": self.torch_reserved_bytes,
            "non_torch_bytes": self.non_torch_bytes,
            "process_bytes": self.process_bytes,
            "timestamp": self.timestamp,
        }


@dataclass(frozen=True)
class DeviceInfo:
    """What the profile file records about the device and its software."""

    kind: str
    """`cuda` or `cpu`."""
    name: str
    """`NVIDIA H100 80GB HBM3`, or `cpu` with the host's processor model."""
    index: int = 0
    driver_version: str | None = None
    cuda_version: str | None = None
    compute_capability: str | None = None
    other_processes_bytes: int | None = None
    """Memory other processes hold on the card at open time (NVML), when known."""
    emulated_capacity_bytes: int | None = None
    extra: dict[str, str | int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "index": self.index,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "compute_capability": self.compute_capability,
            "other_processes_bytes": self.other_processes_bytes,
            "emulated_capacity_bytes": self.emulated_capacity_bytes,
            **self.extra,
        }


class DeviceBackend(Protocol):
    """What the profiler needs from a device."""

    kind: str
    supports_cuda_graphs: bool

    @property
    def torch_device(self) -> str: ...

    def info(self) -> DeviceInfo: ...

    def snapshot(self) -> Snapshot: ...

    def reset_peak(self) -> None: ...

    def empty_cache(self) -> None: ...

    def synchronize(self) -> None: ...

    def allocated_reading(self) -> int:
        """vLLM `DeviceMemoryProfiler` reading: gc, empty_cache, reset peak, then allocated bytes."""
        ...

    def consumed_between(self, before: Snapshot, after: Snapshot) -> int:
        """Memory this process took between two snapshots (vLLM: the drop in free memory)."""
        ...


# --------------------------------------------------------------------------------------------------------
# CPU: /proc readings


def _read_status_kib(field_name: str, path: Path = _PROC_STATUS) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise NoDeviceError(f"cannot read {field_name} from {path}: the cpu backend needs Linux /proc")


def read_rss_bytes() -> int:
    """VmRSS of this process, bytes."""
    return _read_status_kib("VmRSS")


def read_hwm_bytes() -> int:
    """VmHWM (peak resident set since start or the last clear_refs "5"), bytes."""
    return _read_status_kib("VmHWM")


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS by writing "5" to /proc/self/clear_refs; False if not allowed."""
    try:
        _PROC_CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def _meminfo() -> dict[str, int]:
    values: dict[str, int] = {}
    for line in _PROC_MEMINFO.read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[name] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return values


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def cgroup_limit_and_usage() -> tuple[int | None, int | None]:
    """The memory limit and usage of this process's cgroup (v2, else v1); None where there is none."""
    limit = _read_int(_CGROUP_V2_MAX)
    usage = _read_int(_CGROUP_V2_CURRENT)
    if limit is None and usage is None:
        limit = _read_int(_CGROUP_V1_LIMIT)
        usage = _read_int(_CGROUP_V1_USAGE)
    if limit is not None and limit >= _CGROUP_NO_LIMIT:
        limit = None
    return limit, usage


def host_memory() -> tuple[int, int]:
    """(free, total) of the host as this process sees it: MemAvailable / MemTotal, cgroup-capped."""
    info = _meminfo()
    total = info.get("MemTotal", 0)
    free = info.get("MemAvailable", info.get("MemFree", 0))
    limit, usage = cgroup_limit_and_usage()
    if limit is not None and limit < total:
        total = limit
        if usage is not None:
            free = min(free, max(0, limit - usage))
    return free, total


HOST_HEADROOM_FRACTION = 0.9
"""The share of the host's available memory a cpu device may use: its size without --device-memory, and the
bound on every cpu allocation (touching pages past the host's memory summons the kernel's OOM killer)."""


def shared_host_capacity() -> int:
    """The cpu device's size when none is given: HOST_HEADROOM_FRACTION × the host's available memory now."""
    free, _ = host_memory()
    return int(free * HOST_HEADROOM_FRACTION)


def _cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown processor"


class CpuBackend:
    """The host as a device: this process's RSS and high-water mark (see the module docstring)."""

    kind = "cpu"
    supports_cuda_graphs = False

    def __init__(self, capacity_bytes: int | None = None) -> None:
        if not _PROC_STATUS.exists():
            raise NoDeviceError(
                "the cpu backend reads /proc/self/status, which this system lacks (Linux only)"
            )
        if capacity_bytes is not None and capacity_bytes <= 0:
            raise BadInputError(f"--device-memory {capacity_bytes}: must be a positive size")
        self.shared_host = capacity_bytes is None
        """No --device-memory: the device is a share of a host other processes also use."""
        self.capacity_bytes = shared_host_capacity() if capacity_bytes is None else capacity_bytes
        try:
            import torch  # noqa: F401  (the libraries are the process, not the emulated device)
        except ImportError as exc:  # pragma: no cover - torch is a test dependency
            raise_if_pending()  # an import cut by Ctrl-C / SIGTERM is an interrupt, not a missing torch
            raise NoDeviceError(
                "torch is not installed: install vramctl[measure], or use `vramctl plan`"
            ) from exc
        _freeze_import_garbage()
        self.base_rss_bytes = read_rss_bytes()
        self.hwm_resettable = reset_hwm()

    @property
    def torch_device(self) -> str:
        return "cpu"

    def info(self) -> DeviceInfo:
        _, total = host_memory()
        return DeviceInfo(
            kind="cpu",
            name=f"cpu ({_cpu_model_name()})",
            emulated_capacity_bytes=self.capacity_bytes,
            extra={
                "host_total_bytes": total,
                "shared_host": self.shared_host,
                "hostname": socket.gethostname(),
                "peak_reset": "clear_refs" if self.hwm_resettable else "unavailable (peak since start)",
            },
        )

    def snapshot(self) -> Snapshot:
        rss = read_rss_bytes()
        hwm = max(read_hwm_bytes(), rss)
        host_free, host_total = host_memory()
        if self.capacity_bytes is None:
            total = host_total
            free = min(host_free, total)
            base = 0
        else:
            # The emulated device starts empty when it is opened: Python and torch's libraries are not on it.
            total = self.capacity_bytes
            base = min(self.base_rss_bytes, rss)
            free = max(0, min(total - (rss - base), host_free))
        return Snapshot(
            free_bytes=free,
            total_bytes=total,
            torch_allocated_bytes=rss - base,
            torch_peak_bytes=hwm - base,
            torch_reserved_bytes=rss - base,
            process_bytes=rss,
            timestamp=time.time(),
        )

    def reset_peak(self) -> None:
        reset_hwm()

    def empty_cache(self) -> None:
        gc.collect()
        _malloc_trim()

    def synchronize(self) -> None:
        return None

    def allocated_reading(self) -> int:
        self.empty_cache()
        self.reset_peak()
        return read_rss_bytes()

    def consumed_between(self, before: Snapshot, after: Snapshot) -> int:
        # The process's own RSS growth: MemAvailable on a shared host moves with every other process.
        return after.process_bytes - before.process_bytes


def _freeze_import_garbage() -> None:
    """Collect once, then move every object alive now (torch's modules) out of the collector's reach.

    The profile sequence runs gc.collect() before each reading, as vLLM does; with torch imported a full
    collection walks hundreds of thousands of module objects (≈0.3 s each time). Freezing them keeps each
    collection to the objects the measurement creates.
    """
    gc.collect()
    gc.freeze()


def _malloc_trim() -> None:
    """Give freed heap pages back to the OS (glibc), so RSS after a phase reflects what is still held."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


# --------------------------------------------------------------------------------------------------------
# CUDA: torch.cuda + NVML


class CudaBackend:
    """A CUDA device through torch (mem_get_info, memory_stats) and NVML (name, driver, other processes)."""

    kind = "cuda"
    supports_cuda_graphs = True

    def __init__(self, index: int = 0, capacity_bytes: int | None = None) -> None:
        try:
            import torch
        except ImportError as exc:  # pragma: no cover - torch is a test dependency
            raise_if_pending()  # an import cut by Ctrl-C / SIGTERM is an interrupt, not a missing torch
            raise NoDeviceError(
                "torch is not installed: install vramctl[gpu], or use --device cpu, or `vramctl plan` to estimate"
            ) from exc
        if not torch.cuda.is_available():
            raise NoDeviceError(
                "no CUDA device is available: use --device cpu to measure on the host, "
                "or `vramctl plan MODEL --gpu NAME` to estimate without a GPU"
            )
        count = torch.cuda.device_count()
        if not 0 <= index < count:
            raise NoDeviceError(
                f"--device cuda:{index}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})"
            )
        self.index = index
        self.capacity_bytes = capacity_bytes
        self._torch = torch
        _freeze_import_garbage()
        torch.cuda.set_device(index)
        torch.cuda.init()
        self._base_used: int | None = None
        if capacity_bytes is not None:
            free, total = torch.cuda.mem_get_info(index)
            self._base_used = int(total) - int(free)

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.index}"

    def info(self) -> DeviceInfo:
        torch = self._torch
        props = torch.cuda.get_device_properties(self.index)
        name = str(props.name)
        driver: str | None = None
        others: int | None = None
        nvml_name = _nvml_query(self.index)
        if nvml_name is not None:
            name = nvml_name.get("name") or name
            driver = nvml_name.get("driver")
            other_text = nvml_name.get("other_processes_bytes")
            others = int(other_text) if other_text else None
        return DeviceInfo(
            kind="cuda",
            name=name,
            index=self.index,
            driver_version=driver,
            cuda_version=str(torch.version.cuda) if torch.version.cuda else None,
            compute_capability=f"{props.major}.{props.minor}",
            other_processes_bytes=others,
            emulated_capacity_bytes=self.capacity_bytes,
            extra={"hostname": socket.gethostname()},
        )

    def snapshot(self) -> Snapshot:
        torch = self._torch
        torch.cuda.synchronize(self.index)
        free, total = (int(x) for x in torch.cuda.mem_get_info(self.index))
        stats = torch.cuda.memory_stats(self.index)
        reserved = int(torch.cuda.memory_reserved(self.index))
        if self.capacity_bytes is not None and self._base_used is not None:
            own = (total - free) - self._base_used
            total, free = self.capacity_bytes, max(0, min(free, self.capacity_bytes - own))
        return Snapshot(
            free_bytes=free,
            total_bytes=total,
            torch_allocated_bytes=int(stats.get("allocated_bytes.all.current", 0)),
            torch_peak_bytes=int(stats.get("allocated_bytes.all.peak", 0)),
            torch_reserved_bytes=reserved,
            process_bytes=reserved,
            timestamp=time.time(),
        )

    def reset_peak(self) -> None:
        self._torch.cuda.reset_peak_memory_stats(self.index)

    def empty_cache(self) -> None:
        gc.collect()
        self._torch.cuda.empty_cache()

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self.index)

    def allocated_reading(self) -> int:
        # vLLM DeviceMemoryProfiler → platform.get_current_memory_usage (vllm/platforms/cuda.py:369-374).
        self.empty_cache()
        self.reset_peak()
        return int(self._torch.cuda.max_memory_allocated(self.index))

    def consumed_between(self, before: Snapshot, after: Snapshot) -> int:
        # vLLM ≥0.28 total_consumed = before_create.free − after_profile.free (mem_utils.py:312-314).
        return before.free_bytes - after.free_bytes


def _nvml_query(index: int) -> dict[str, str] | None:
    """NVML device name, driver and the memory other processes hold; None when NVML is unusable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(_physical_index(index))
        name = pynvml.nvmlDeviceGetName(handle)
        driver = pynvml.nvmlSystemGetDriverVersion()
        own_pid = os.getpid()
        others = 0
        try:
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used = getattr(proc, "usedGpuMemory", None)
                if proc.pid != own_pid and isinstance(used, int):
                    others += used
        except Exception:
            others = -1
        return {
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "driver": driver.decode() if isinstance(driver, bytes) else str(driver),
            "other_processes_bytes": "" if others < 0 else str(others),
        }
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _physical_index(index: int) -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return index
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if index < len(parts) and parts[index].isdigit():
        return int(parts[index])
    return index


# --------------------------------------------------------------------------------------------------------


def parse_device(text: str) -> tuple[str, int]:
    """`cuda`, `cuda:1`, `cpu`, `gpu` → (kind, index). Bad text → BadInputError."""
    raw = text.strip().lower()
    if raw in ("cpu", "host"):
        return "cpu", 0
    if raw in ("cuda", "gpu"):
        return "cuda", 0
    for prefix in ("cuda:", "gpu:"):
        if raw.startswith(prefix) and raw[len(prefix) :].isdigit():
            return "cuda", int(raw[len(prefix) :])
    raise BadInputError(f"--device {text!r}: expected cpu, cuda or cuda:N")


def open_device(text: str, *, capacity_bytes: int | None = None, local_rank: int = 0) -> DeviceBackend:
    """Open a backend from `--device` text; with TP, rank r of a `cuda` device uses cuda:(index + r)."""
    kind, index = parse_device(text)
    if kind == "cpu":
        return CpuBackend(capacity_bytes)
    return CudaBackend(index + local_rank, capacity_bytes)
