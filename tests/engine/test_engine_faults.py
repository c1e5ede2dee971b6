"""The tier's own hygiene, against the real server: a server that is not up in time and one whose port is taken
are reported in one line with every process of theirs stopped; a server that comes up listens on loopback only
(the `engine_server` fixture other engine tests use)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import engine_harness as harness

CONFIG = harness.CONFIGS / "qwen3-gqa"
ARGS = ["--max-model-len", "256", "--kv-cache-memory-bytes", "8388608"]


def _gone(pgid: int, wait_s: float = 20) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not harness.group_alive(pgid):
            return True
        time.sleep(0.5)
    return False


def test_a_server_not_up_in_time_is_stopped_with_one_line(engine_env: Any, tmp_path: Path) -> None:
    run, proc = harness.start_server("too-slow", CONFIG, ARGS, {}, tmp_path, timeout_s=3)
    assert proc is None and not run.started
    assert run.error.count("\n") == 0
    assert "was not healthy within 3 s" in run.error
    assert _gone(run.pgid), "processes of the timed-out server are still running"


def test_a_port_in_use_is_reported_in_one_line(engine_env: Any, tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = int(taken.getsockname()[1])
        run, proc = harness.start_server("port-taken", CONFIG, ARGS, {}, tmp_path, timeout_s=300, port=port)
    assert proc is None and not run.started
    assert run.error.count("\n") == 0
    assert "exited with status" in run.error, run.error
    assert "Address already in use" in run.log or "address already in use" in run.log.lower()
    assert _gone(run.pgid)


def _listening_addresses(port: int) -> set[str]:
    """The local addresses with a TCP socket listening on `port` (from /proc/net/tcp and tcp6)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            address, _, port_hex = local.partition(":")
            if state == "0A" and int(port_hex, 16) == port:  # 0A = LISTEN
                found.add(address)
    return found


def test_a_live_server_listens_on_loopback_only(
    engine_server: Callable[..., Any], engine_record: Callable[..., None]
) -> None:
    # Only what the start-up proves: on the shared development machine the CPU worker dies with SIGILL (exit
    # code -4) on its first forward pass (the wheel's kernels and that virtual CPU disagree), so the tier sends
    # no generation request; start-up runs no forward pass with --enforce-eager and an explicit KV size.
    server = engine_server("qwen3-gqa", ARGS, name="live-qwen3-gqa")
    addresses = _listening_addresses(server.port)
    loopback = {"0100007F"}  # 127.0.0.1, little-endian hex
    engine_record(
        "hygiene", "live-qwen3-gqa", "listens on", sorted(addresses), "127.0.0.1 only", addresses <= loopback
    )
    assert addresses and addresses <= loopback, f"listening on {addresses}"
    assert server.get("/health") is not None
    assert "vllm:cache_config_info" in (server.get("/metrics") or "")
