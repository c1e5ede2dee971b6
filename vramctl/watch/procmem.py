"""The cpu device's memory, from /proc and the cgroup (Linux): the server's processes' VmRSS / VmHWM, the
host's MemTotal / MemAvailable, and the cgroup's usage and limit when the server runs in one with a limit.

Also finds the server's processes from its URL: the process listening on the port (/proc/net/tcp{,6},
then the socket inode in /proc/PID/fd) and its descendants (vLLM's EngineCore, SGLang's scheduler).
Everything takes `proc_root` / `cgroup_root` so tests can point it at a fake tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vramctl.watch.devices import DeviceMemory

_LISTEN = "0A"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def listening_inodes(port: int, proc_root: Path = Path("/proc")) -> set[str]:
    inodes: set[str] = set()
    for table in ("net/tcp", "net/tcp6"):
        text = _read(proc_root / table)
        if text is None:
            continue
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            _, _, port_hex = fields[1].rpartition(":")
            try:
                if int(port_hex, 16) == port:
                    inodes.add(fields[9])
            except ValueError:
                continue
    return inodes


def _pids(proc_root: Path) -> list[int]:
    try:
        return [int(name) for name in os.listdir(proc_root) if name.isdigit()]
    except OSError:
        return []


def listener_pids(port: int, proc_root: Path = Path("/proc")) -> frozenset[int]:
    """The processes holding a listening socket on `port` (those we may read: our own, or all as root)."""
    inodes = listening_inodes(port, proc_root)
    if not inodes:
        return frozenset()
    wanted = {f"socket:[{inode}]" for inode in inodes}
    found: set[int] = set()
    for pid in _pids(proc_root):
        fd_dir = proc_root / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in names:
            try:
                if os.readlink(fd_dir / fd) in wanted:
                    found.add(pid)
                    break
            except OSError:
                continue
    return frozenset(found)


def _ppid(pid: int, proc_root: Path) -> int | None:
    text = _read(proc_root / str(pid) / "stat")
    if text is None:
        return None
    # the command name is in parentheses and may hold spaces: the fields after the last ')'
    rest = text[text.rfind(")") + 2 :].split()
    try:
        return int(rest[1])
    except (IndexError, ValueError):
        return None


def with_descendants(roots: frozenset[int], proc_root: Path = Path("/proc")) -> frozenset[int]:
    if not roots:
        return roots
    children: dict[int, list[int]] = {}
    for pid in _pids(proc_root):
        parent = _ppid(pid, proc_root)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    found = set(roots)
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return frozenset(found)


def server_pids(port: int, proc_root: Path = Path("/proc")) -> frozenset[int]:
    """The server behind a local port: the listener and every descendant."""
    return with_descendants(listener_pids(port, proc_root), proc_root)


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    rss_bytes: int
    hwm_bytes: int


def process_memory(pid: int, proc_root: Path = Path("/proc")) -> ProcessMemory | None:
    """VmRSS and VmHWM of one process (None when it is gone or is a kernel thread)."""
    text = _read(proc_root / str(pid) / "status")
    if text is None:
        return None
    rss = hwm = None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = _kib(line)
        elif line.startswith("VmHWM:"):
            hwm = _kib(line)
    if rss is None:
        return None
    return ProcessMemory(pid, rss, hwm if hwm is not None else rss)


def _kib(line: str) -> int | None:
    fields = line.split()
    try:
        return int(fields[1]) * 1024
    except (IndexError, ValueError):
        return None


def meminfo(proc_root: Path = Path("/proc")) -> dict[str, int]:
    text = _read(proc_root / "meminfo") or ""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        value = _kib("x " + rest.strip())
        if value is not None:
            out[key] = value
    return out


@dataclass(frozen=True)
class CgroupMemory:
    path: str
    usage_bytes: int
    limit_bytes: int | None
    """None when unlimited (`max`)."""
    inactive_file_bytes: int = 0


def cgroup_memory(
    pid: int, proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")
) -> CgroupMemory | None:
    """The memory cgroup (v2, or v1's memory controller) of a process: usage, limit, inactive file pages."""
    text = _read(proc_root / str(pid) / "cgroup")
    if text is None:
        return None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, rel = parts
        if hierarchy == "0" and controllers == "":
            base = cgroup_root / rel.lstrip("/")
            usage = _int_file(base / "memory.current")
            if usage is None:
                continue
            limit_text = (_read(base / "memory.max") or "max").strip()
            limit = None if limit_text == "max" else _to_int(limit_text)
            stat = _read(base / "memory.stat") or ""
            return CgroupMemory(rel, usage, limit, _stat_value(stat, "inactive_file"))
        if "memory" in controllers.split(","):
            base = cgroup_root / "memory" / rel.lstrip("/")
            usage = _int_file(base / "memory.usage_in_bytes")
            if usage is None:
                continue
            limit = _int_file(base / "memory.limit_in_bytes")
            if limit is not None and limit >= 1 << 60:
                limit = None
            stat = _read(base / "memory.stat") or ""
            return CgroupMemory(rel, usage, limit, _stat_value(stat, "total_inactive_file"))
    return None


def _to_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _int_file(path: Path) -> int | None:
    text = _read(path)
    return None if text is None else _to_int(text.strip())


def _stat_value(stat: str, key: str) -> int:
    for line in stat.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return _to_int(value.strip()) or 0
    return 0


class HostReader:
    """The cpu device: host RAM (or the server's cgroup when its limit is lower) split by the server's RSS."""

    kind = "cpu"

    def __init__(self, proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> None:
        self.proc_root = proc_root
        self.cgroup_root = cgroup_root

    def read(self, pids: frozenset[int]) -> tuple[DeviceMemory, ...]:
        info = meminfo(self.proc_root)
        total = info.get("MemTotal", 0)
        used = total - info.get("MemAvailable", info.get("MemFree", 0))
        name = "host"
        procs = [m for m in (process_memory(pid, self.proc_root) for pid in sorted(pids)) if m is not None]
        if procs:
            group = cgroup_memory(procs[0].pid, self.proc_root, self.cgroup_root)
            if group is not None and group.limit_bytes is not None and group.limit_bytes < total:
                total = group.limit_bytes
                used = max(0, group.usage_bytes - group.inactive_file_bytes)
                name = f"cgroup {group.path}"
        server = sum(m.rss_bytes for m in procs)
        return (
            DeviceMemory(
                kind="cpu",
                index=0,
                uuid="",
                name=name,
                capacity_bytes=total,
                used_bytes=max(0, used),
                server_bytes=server,
                server_peak_bytes=sum(m.hwm_bytes for m in procs) if procs else None,
                processes=tuple((m.pid, m.rss_bytes) for m in procs),
            ),
        )

    def close(self) -> None:
        return None
