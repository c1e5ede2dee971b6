"""One reader interface for device memory: NVML on a GPU (`vramctl.measure.nvml`), /proc and the cgroup on
the cpu device (`vramctl.watch.procmem`). A sample only ever sees `DeviceMemory`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class DeviceMemory:
    """One device (a GPU, or the host for the cpu device) at one instant. Bytes are ints."""

    kind: str
    """`cuda` (NVML) or `cpu` (host RAM: /proc/meminfo, or the cgroup's limit when it is lower)."""
    index: int
    uuid: str
    name: str
    capacity_bytes: int
    used_bytes: int
    """Everything in use on the device (NVML used; host: MemTotal − MemAvailable, or the cgroup's usage)."""
    server_bytes: int
    """The server's processes (NVML per-process used memory; host: their summed VmRSS)."""
    server_peak_bytes: int | None = None
    """The server's high-water mark when the device keeps one (host: summed VmHWM)."""
    processes: tuple[tuple[int, int], ...] = ()
    """(pid, bytes) of the server's processes on this device."""

    @property
    def other_bytes(self) -> int:
        """Memory other processes hold: used − the server's (never negative)."""
        return max(0, self.used_bytes - self.server_bytes)

    @property
    def free_bytes(self) -> int:
        return max(0, self.capacity_bytes - max(self.used_bytes, self.server_bytes))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "capacity_bytes": self.capacity_bytes,
            "used_bytes": self.used_bytes,
            "server_bytes": self.server_bytes,
            "server_peak_bytes": self.server_peak_bytes,
            "other_bytes": self.other_bytes,
            "free_bytes": self.free_bytes,
            "processes": [{"pid": pid, "bytes": used} for pid, used in self.processes],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceMemory:
        peak = data.get("server_peak_bytes")
        return cls(
            kind=str(data["kind"]),
            index=_int(data["index"]),
            uuid=str(data.get("uuid", "")),
            name=str(data.get("name", "")),
            capacity_bytes=_int(data["capacity_bytes"]),
            used_bytes=_int(data["used_bytes"]),
            server_bytes=_int(data["server_bytes"]),
            server_peak_bytes=None if peak is None else _int(peak),
            processes=tuple((_int(p["pid"]), _int(p["bytes"])) for p in data.get("processes", [])),
        )


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"not a byte count: {value!r}")
    return value


class DeviceReader(Protocol):
    """What a sampler needs from a device backend: the devices' memory, split by the server's pids."""

    kind: str

    def read(self, pids: frozenset[int]) -> tuple[DeviceMemory, ...]:
        """Every device this reader sees, with the given processes counted as the server's."""
        ...

    def close(self) -> None: ...
