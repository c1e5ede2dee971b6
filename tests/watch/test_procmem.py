"""The cpu device reader: the server's processes from its port, their VmRSS / VmHWM, the cgroup's limit."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from vramctl.watch import procmem
from vramctl.watch.procmem import HostReader


def _proc(root: Path, pid: int, ppid: int, rss_kib: int, hwm_kib: int, fds: dict[str, str], cgroup: str) -> None:
    d = root / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (VLLM::Engine Core) S {ppid} 1 1 0 -1\n")
    (d / "status").write_text(f"Name:\tx\nVmHWM:\t{hwm_kib} kB\nVmRSS:\t{rss_kib} kB\n")
    (d / "cgroup").write_text(cgroup)
    for fd, target in fds.items():
        os.symlink(target, d / "fd" / fd)


def _tree(tmp_path: Path, limit: str = "max") -> tuple[Path, Path]:
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    # port 8000 = 0x1F40, LISTEN (0A), inode 4242; a connected socket on 8000 (01) is not the server
    (proc / "net" / "tcp").write_text(
        header
        + "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 4242 1\n"
        + "   1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  0 0 5555 1\n"
    )
    (proc / "net" / "tcp6").write_text(header)
    (proc / "meminfo").write_text("MemTotal:  16777216 kB\nMemFree: 1000 kB\nMemAvailable:  8388608 kB\n")
    cg = "0::/kubepods/pod1\n"
    _proc(proc, 100, 1, 500_000, 600_000, {"3": "socket:[4242]"}, cg)
    _proc(proc, 101, 100, 2_000_000, 2_500_000, {}, cg)
    _proc(proc, 102, 101, 1_000, 1_000, {}, cg)
    _proc(proc, 200, 1, 300_000, 300_000, {"3": "socket:[5555]"}, "0::/other\n")
    cgroot = tmp_path / "cgroup"
    (cgroot / "kubepods" / "pod1").mkdir(parents=True)
    (cgroot / "kubepods" / "pod1" / "memory.current").write_text(str(6 << 30))
    (cgroot / "kubepods" / "pod1" / "memory.max").write_text(limit)
    (cgroot / "kubepods" / "pod1" / "memory.stat").write_text(f"anon 1\ninactive_file {1 << 30}\n")
    return proc, cgroot


def test_server_pids_are_the_listener_and_its_descendants(tmp_path: Path) -> None:
    proc, _ = _tree(tmp_path)
    assert procmem.listener_pids(8000, proc) == {100}
    assert procmem.server_pids(8000, proc) == {100, 101, 102}
    assert procmem.server_pids(9000, proc) == frozenset()


def test_host_reader_without_a_cgroup_limit(tmp_path: Path) -> None:
    proc, cgroot = _tree(tmp_path)
    (dev,) = HostReader(proc, cgroot).read(frozenset({100, 101, 102}))
    assert dev.capacity_bytes == 16 << 30 and dev.used_bytes == 8 << 30
    assert dev.server_bytes == (500_000 + 2_000_000 + 1_000) * 1024
    assert dev.server_peak_bytes == (600_000 + 2_500_000 + 1_000) * 1024
    assert dev.other_bytes == (8 << 30) - dev.server_bytes
    assert dev.name == "host"


def test_host_reader_uses_a_lower_cgroup_limit(tmp_path: Path) -> None:
    proc, cgroot = _tree(tmp_path, limit=str(10 << 30))
    (dev,) = HostReader(proc, cgroot).read(frozenset({100, 101}))
    assert dev.capacity_bytes == 10 << 30
    assert dev.used_bytes == 5 << 30  # usage − inactive file pages
    assert dev.name == "cgroup /kubepods/pod1"


def test_gone_processes_are_skipped(tmp_path: Path) -> None:
    proc, cgroot = _tree(tmp_path)
    (dev,) = HostReader(proc, cgroot).read(frozenset({100, 999}))
    assert [pid for pid, _ in dev.processes] == [100]


def test_real_proc_finds_our_own_listener() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert os.getpid() in procmem.server_pids(port)
    (dev,) = HostReader().read(frozenset({os.getpid()}))
    assert dev.server_bytes > 10 << 20 and dev.capacity_bytes >= dev.used_bytes >= dev.server_bytes
