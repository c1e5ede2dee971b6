"""A process that leaks at a known rate is found within the window, with its rate within 20 %."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vramctl.core.units import MiB
from vramctl.watch.procmem import HostReader
from vramctl.watch.run import watch_loop
from vramctl.watch.sampler import Sampler
from vramctl.watch.trends import MEMORY_LEAK, TrendConfig

ROOT = Path(__file__).resolve().parents[2]
RATE = 24 * MiB  # bytes per second


def test_injected_leak_is_found_with_its_rate() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.watch.leaker", str(RATE)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        sampler = Sampler(f"http://127.0.0.1:{port}", HostReader())
        result = watch_loop(
            sampler, interval_s=0.25, duration_s=8.0, config=TrendConfig(window_s=30, min_span_s=5)
        )
    finally:
        proc.kill()
        proc.wait()
    assert sampler.pids == {proc.pid}
    assert result.report is not None
    leaks = [a for a in result.report.alarms if a.cause == MEMORY_LEAK]
    assert leaks, result.report
    measured = leaks[0].rate_bytes_per_s
    assert measured is not None and abs(measured - RATE) <= 0.2 * RATE, (measured / MiB, RATE / MiB)
    assert leaks[0].time_to_exhaustion_s is not None and leaks[0].time_to_exhaustion_s > 0
