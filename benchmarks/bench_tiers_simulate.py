"""Tier simulator speed on the Mooncake conversation trace (12,031 requests), ratios in one run.

    python benchmarks/bench_tiers_simulate.py [--trace the Mooncake traces (github.com/kvcache-ai/Mooncake, FAST25-release/traces)/conversation_trace.jsonl]
                                              [--repeat 5]

Measures, each `--repeat` times (median and best reported):
- load: parsing the JSONL trace;
- replay-1tier: one single-tier LRU replay (GPU 3 M tokens), the baseline;
- replay-2tier: the issue's "two-tier configuration": GPU 1 M + host 3 M tokens, write_through, inclusive
  (target: about a second);
- replay-2tier-exclusive and replay-3tier (adds a 10 M-token disk tier);
- sweep-20: a 20-point LRU capacity sweep by one stack-distance pass (target: no longer than a few
  single replays), and the same 20 points by 20 replays for comparison.
Results are recorded in docs/perf/tiers-simulate.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from vramctl.tiers.simulate import EXCLUSIVE, WRITE_BACK, SimConfig, TierConfig, lru_sweep, simulate
from vramctl.tiers.trace import load_mooncake

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"
SWEEP = [round(10 ** (4 + 4.2 * i / 19)) for i in range(20)]  # 1e4 … ~1.6e8 tokens, log-spaced


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(median wall s, best wall s, median CPU s of this process: steadier on a shared machine)."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), min(wall), statistics.median(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    trace = load_mooncake(args.trace)
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; {args.trace}")
    print(
        f"{trace.num_requests:,} requests, {sum(len(b) for b in trace.blocks):,} block accesses, "
        f"{trace.num_unique_blocks:,} unique blocks"
    )

    two = (TierConfig("gpu", 10**6), TierConfig("host", 3 * 10**6))
    three = (*two, TierConfig("disk", 10**7))
    cases: list[tuple[str, Callable[[], object]]] = [
        ("load", lambda: load_mooncake(args.trace)),
        ("replay-1tier", lambda: simulate(trace, SimConfig(tiers=(TierConfig("gpu", 3 * 10**6),)))),
        ("replay-2tier", lambda: simulate(trace, SimConfig(tiers=two))),
        (
            "replay-2tier-exclusive",
            lambda: simulate(trace, SimConfig(tiers=two, hierarchy=EXCLUSIVE, write_policy=WRITE_BACK)),
        ),
        ("replay-3tier", lambda: simulate(trace, SimConfig(tiers=three))),
        ("sweep-20 (stack distance)", lambda: lru_sweep(trace, SWEEP)),
        (
            "sweep-20 (20 replays)",
            lambda: [simulate(trace, SimConfig(tiers=(TierConfig("gpu", c),))) for c in SWEEP],
        ),
    ]
    results: dict[str, tuple[float, float, float]] = {}
    for name, fn in cases:
        repeat = 1 if "20 replays" in name else args.repeat
        results[name] = timed(fn, repeat)
    base = results["replay-1tier"][2]
    two_tier = results["replay-2tier"][2]
    print(
        f"load average {os.getloadavg()[0]:.2f} (wall times suffer on a shared machine; ratios use CPU time)"
    )
    print(f"{'case':<28}{'median s':>10}{'best s':>10}{'CPU s':>10}{'÷ 1-tier':>10}{'÷ 2-tier':>10}")
    for name, (median, best, cpu) in results.items():
        print(f"{name:<28}{median:>10.3f}{best:>10.3f}{cpu:>10.3f}{cpu / base:>10.2f}{cpu / two_tier:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
