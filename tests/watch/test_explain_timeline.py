"""`explain-oom LOG --timeline FILE`: the time series names what one OOM line cannot (a leak, a neighbour,
fragmentation), with its numbers; a damaged timeline is one line and exit 2."""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.watch.test_trends import BASE, SIZES, engine, gpu
from vramctl.core.units import GiB, MiB
from vramctl.watch.ring import RingRecorder
from vramctl.watch.sample import DOWN, UP, make_sample

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "fixtures" / "watch" / "vllm_serving_oom.log"
# the log's failure: 12-02 03:10:19 (the recorder's UTC offset is 0 here)
FAIL_T = float(calendar.timegm((2026, 12, 2, 3, 10, 19, 0, 0, 0)))


def _timeline(path: Path, server: list[int], other: list[int] | None = None, running: list[int] | None = None,
              dt: float = 60.0, die: bool = True) -> None:
    rec = RingRecorder(path, max_samples=1000, meta={"utc_offset_s": 0}, fsync=False)
    n = len(server)
    t0 = FAIL_T - 5 - (n - 1) * dt
    for i in range(n):
        dev = gpu(server[i], other[i] if other else GiB)
        e = engine(running=running[i] if running else 16)
        rec.append(make_sample(t0 + i * dt, UP, e, (dev,), SIZES))
    if die:
        rec.append(make_sample(FAIL_T + 8, DOWN, None, (gpu(0, GiB),), SIZES, error="connection refused"))
    rec.close()


def _explain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vramctl", "explain-oom", str(LOG), *args], capture_output=True, text=True, cwd=ROOT
    )


def test_the_log_alone_cannot_see_the_leak() -> None:
    result = _explain("--json")
    assert json.loads(result.stdout)["cause"] != "memory-leak"


def test_a_two_hour_leak_is_diagnosed_from_the_timeline(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    rate = 2 * MiB  # per second: 14 GiB over two hours
    _timeline(path, [BASE + int(rate * 60 * i) for i in range(120)])
    result = _explain("--timeline", str(path), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    tl = data["timeline"]
    assert tl["cause"] == "memory-leak"
    assert "the log's last time, 2026-12-02 03:10:19 UTC" in tl["joined_by"]
    leak = tl["alarms"][0]
    assert abs(leak["rate_bytes_per_s"] - rate) < 0.01 * rate
    assert "MiB/s" in leak["evidence"][0] and "restart the server within" in leak["fix"]
    assert data["cause"]  # the log's own diagnosis is kept as it was


def test_a_growing_neighbour_is_diagnosed_from_the_timeline(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    _timeline(path, [BASE] * 60, other=[GiB + i * 200 * MiB for i in range(60)])
    data = json.loads(_explain("--timeline", str(path), "--json").stdout)
    assert data["timeline"]["cause"] == "gpu-util-exceeds-free-memory"
    assert "--gpu-memory-utilization" in data["timeline"]["alarms"][0]["fix"]


def test_fragmentation_is_diagnosed_from_the_timeline(tmp_path: Path) -> None:
    server, running, level = [], [], BASE
    for i in range(80):
        peak = i % 20 == 10
        level += 512 * MiB if peak else 0
        server.append(level)
        running.append(96 if peak else 8)
    path = tmp_path / "tl.jsonl"
    _timeline(path, server, running=running)
    data = json.loads(_explain("--timeline", str(path), "--json").stdout)
    assert data["timeline"]["cause"] == "allocator-fragmentation"


def test_a_flat_timeline_says_no_trend(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    _timeline(path, [BASE] * 30)
    result = _explain("--timeline", str(path))
    assert result.returncode == 0
    assert "timeline" in result.stdout and "no trend" in result.stdout


def test_the_text_view_shows_the_evidence(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    _timeline(path, [BASE + 2 * MiB * 60 * i for i in range(120)])
    result = _explain("--timeline", str(path))
    assert result.returncode == 0 and "memory-leak" in result.stdout and "MiB/s" in result.stdout


@pytest.mark.parametrize(
    "content, words",
    [(b"", "empty or truncated"), (b'{"vramctl_timeline": 1}\n{"t": 1, "sta', "no complete sample"), (b"garbage\n", "corrupt")],
)
def test_a_damaged_timeline_is_one_line_and_exit_2(tmp_path: Path, content: bytes, words: str) -> None:
    path = tmp_path / "tl.jsonl"
    path.write_bytes(content)
    result = _explain("--timeline", str(path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and words in result.stderr and "Traceback" not in result.stderr


def test_a_missing_timeline_is_exit_2(tmp_path: Path) -> None:
    result = _explain("--timeline", str(tmp_path / "nope.jsonl"))
    assert result.returncode == 2 and "no such file" in result.stderr


def test_a_log_without_a_failure_plus_a_leaking_timeline_is_diagnosed(tmp_path: Path) -> None:
    log = tmp_path / "quiet.log"
    log.write_text("INFO 12-02 03:10:12 [loggers.py:248] Engine 000: Running: 16 reqs, Waiting: 0 reqs\n")
    path = tmp_path / "tl.jsonl"
    _timeline(path, [BASE + int(2 * MiB * 60 * i) for i in range(120)])
    alone = subprocess.run([sys.executable, "-m", "vramctl", "explain-oom", str(log)], capture_output=True, text=True)
    assert alone.returncode == 3
    joined = subprocess.run(
        [sys.executable, "-m", "vramctl", "explain-oom", str(log), "--timeline", str(path), "--json"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert joined.returncode == 0, joined.stderr
    assert json.loads(joined.stdout)["timeline"]["cause"] == "memory-leak"


def test_a_log_on_stdin_joins_at_the_servers_death(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    _timeline(path, [BASE] * 30, other=[GiB + i * 300 * MiB for i in range(30)])
    result = subprocess.run(
        [sys.executable, "-m", "vramctl", "explain-oom", "-", "--timeline", str(path), "--json"],
        input=LOG.read_text(), capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    timeline = json.loads(result.stdout)["timeline"]
    assert timeline["joined_by"].startswith("the server's death in the timeline")
    assert timeline["cause"] == "gpu-util-exceeds-free-memory"
