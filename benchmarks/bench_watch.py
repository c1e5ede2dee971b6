"""The CPU cost of `vramctl watch` sampling, against an idle loop with the same schedule.

A fake vLLM server (the /metrics body of v0.32: ~150 series, `tests/watch/fakes.py` plus padding series)
runs in a separate process, so its CPU is not counted. In this process, for --seconds each:
  - the idle loop: the watch's own tick schedule (sleep until the next tick) doing nothing,
  - the watch: `watch_loop` at --interval with the cpu device reader (/proc, the server's pids found from
    its port), trends over a 300 s window, and optionally a fsync'd --record ring,
and reports process CPU seconds (user + system, getrusage) of each, the difference as a share of one core,
and the CPU per sample. Then a burst (--burst samples back to back) measures the CPU per sample precisely,
whose share of a 1 s interval is the second estimate.

    python benchmarks/bench_watch.py --seconds 60
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SERVER = """
import http.server, sys, threading
from tests.watch.fakes import EngineState, vllm_body
state = EngineState()
pad = "".join(f'vllm:request_latency_seconds_bucket{{engine="0",le="{i}",model_name="m"}} {i}.0\\n' for i in range(140))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        data = (vllm_body(state) + pad).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def idle_loop(seconds: float, interval: float) -> float:
    start_cpu, start = cpu_s(), time.monotonic()
    next_tick = start
    while True:
        next_tick += interval
        if next_tick - start > seconds:
            break
        time.sleep(max(0.0, next_tick - time.monotonic()))
    return cpu_s() - start_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--burst", type=int, default=300)
    args = parser.parse_args()

    from vramctl.watch.procmem import HostReader
    from vramctl.watch.ring import RingRecorder
    from vramctl.watch.run import watch_loop
    from vramctl.watch.sampler import Sampler
    from vramctl.watch.trends import TrendConfig

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        config = TrendConfig(window_s=300)
        rows = []
        idle = idle_loop(args.seconds, args.interval)
        rows.append(("idle loop (baseline)", idle, 0))
        with tempfile.TemporaryDirectory() as tmp:
            for label, record in (("watch", False), ("watch --record (fsync each sample)", True)):
                sampler = Sampler(url, HostReader())
                recorder = RingRecorder(Path(tmp) / "tl.jsonl", max_samples=3600) if record else None
                start = cpu_s()
                result = watch_loop(sampler, interval_s=args.interval, config=config, duration_s=args.seconds,
                                    recorder=recorder)
                rows.append((label, cpu_s() - start, result.samples))
                if recorder:
                    recorder.close()
            sampler = Sampler(url, HostReader())
            start = cpu_s()
            t0 = time.monotonic()
            result = watch_loop(sampler, interval_s=0.0001, config=config, max_samples=args.burst)
            burst_cpu, burst_wall = cpu_s() - start, time.monotonic() - t0
    finally:
        server.kill()
        server.wait()
    print(f"{args.seconds:g} s at a {args.interval:g} s interval; server pids found: {sorted(sampler.pids)}")
    print(f"{'run':40} {'CPU s':>8} {'samples':>8} {'over idle, % of one core':>26} {'CPU ms/sample':>14}")
    for label, cpu, samples in rows:
        over = (cpu - idle) / args.seconds * 100
        per = "" if not samples else f"{(cpu - idle) / samples * 1000:.2f}"
        print(f"{label:40} {cpu:8.3f} {samples:8d} {over:25.3f}% {per:>14}")
    per_sample = burst_cpu / result.samples
    print(
        f"burst: {result.samples} samples back to back, {burst_cpu:.3f} CPU s in {burst_wall:.2f} s wall: "
        f"{per_sample * 1000:.2f} ms CPU per sample = {per_sample / args.interval * 100:.3f} % of one core at "
        f"a {args.interval:g} s interval"
    )


if __name__ == "__main__":
    main()
