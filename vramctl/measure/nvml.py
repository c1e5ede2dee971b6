"""NVML behind the watch's DeviceReader: per-device total / used and the server's processes' used memory.

The only module that imports pynvml (the `nvidia-ml-py` package, extra `gpu`), lazily, when `watch` runs on
a GPU machine. Per-process memory is `nvmlDeviceGetComputeRunningProcesses(...).usedGpuMemory` (None on
drivers / MIG setups that do not report it: counted as 0 and said in the device name).
"""

from __future__ import annotations

from typing import Any

from vramctl.core.errors import NoDeviceError
from vramctl.watch.devices import DeviceMemory


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    kind = "cuda"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise NoDeviceError("--device cuda needs nvidia-ml-py: pip install 'vramctl[gpu]'") from None
        try:
            pynvml.nvmlInit()
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            raise NoDeviceError(f"NVML: {exc} (no NVIDIA driver? use --device cpu)") from None
        if count == 0:
            pynvml.nvmlShutdown()
            raise NoDeviceError("NVML sees no GPU (use --device cpu)")
        self._nvml = pynvml
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in self._handles]
        self._names = [_text(pynvml.nvmlDeviceGetName(h)) for h in self._handles]

    def read(self, pids: frozenset[int]) -> tuple[DeviceMemory, ...]:
        nvml = self._nvml
        out = []
        for index, handle in enumerate(self._handles):
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
            procs: list[tuple[int, int]] = []
            unreported = False
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if int(proc.pid) in pids:
                    used = proc.usedGpuMemory
                    unreported |= used is None
                    procs.append((int(proc.pid), int(used or 0)))
            name = self._names[index] + (" (per-process memory not reported)" if unreported else "")
            out.append(
                DeviceMemory(
                    kind="cuda",
                    index=index,
                    uuid=self._uuids[index],
                    name=name,
                    capacity_bytes=int(info.total),
                    used_bytes=int(info.used),
                    server_bytes=sum(b for _, b in procs),
                    processes=tuple(procs),
                )
            )
        return tuple(out)

    def close(self) -> None:
        self._nvml.nvmlShutdown()
