"""Tier simulator speed: the Mooncake conversation trace (ratios in one run) and a synthetic scaling table.

    python benchmarks/bench_tiers_simulate.py [--trace MOONCAKE/conversation_trace.jsonl]
                                              [--repeat 5] [--scale 10000,100000,1000000,10000000]

Part 1, the Mooncake conversation trace (12,031 requests), each case `--repeat` times (median CPU s):
- load: parsing the JSONL trace (tuples, for the replay) and load-columns (numpy columns, for the sweep);
- replay-1tier (GPU 3 M tokens), replay-2tier (GPU 1 M + host 3 M, write_through), replay-2tier-exclusive,
  replay-3tier (+ a 10 M-token disk tier), replay-unlimited+host (the default --gpu-capacity with a host
  tier: was quadratic);
- naive-4: four independent OrderedDict LRU replays (the baseline the issue names);
- sweep-20 exact: the 20-point LRU sweep by one numpy stack-distance pass (from the columns), and the
  same 20 points by 20 replays; sweep-20 sampled 1 %: SHARDS at R = 0.01, with its largest error vs exact.
Part 2 (`--scale`), a seeded synthetic multi-turn trace per size, every case in a fresh process (peak RSS
is the process's own, plus its worker processes' for the sharded case):
- naive (one OrderedDict replay at one capacity) and replay (`simulate`, one capacity), up to 1 M requests
  (their per-request Python objects do not fit beyond);
- exact sweep (20 points; the trace held as numpy columns), sampled sweep (1 %, 20 points; the trace
  streamed chunk by chunk from the generator, generation time included), sharded exact sweep over 2 local
  processes.
Results are recorded in docs/perf/tiers-simulate.md and docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from vramctl.tiers import stackdist
from vramctl.tiers.simulate import EXCLUSIVE, WRITE_BACK, SimConfig, TierConfig, lru_sweep, simulate
from vramctl.tiers.trace import Trace, load_mooncake

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"
SWEEP = [round(10 ** (4 + 4.2 * i / 19)) for i in range(20)]  # 1e4 … ~1.6e8 tokens, log-spaced
NAIVE_4 = [10**5, 10**6, 10**7, 10**8]
BLOCK = 512
NAIVE_LIMIT = 1_000_000
ONE_CAP = SWEEP[10]
"""The single capacity of the naive and replay cases (~1.6 M tokens), one of the sweep's points."""


def naive_lru(lengths: Any, blocks: Any, bs: int, capacity_tokens: int | None) -> int:
    """The plainest prefix-LRU replay: one OrderedDict, lookup before the request's touches."""
    cap = None if capacity_tokens is None else capacity_tokens // bs
    cache: OrderedDict[int, None] = OrderedDict()
    hit_tokens = 0
    for length, ids in zip(lengths, blocks, strict=True):
        k = 0
        for b in ids:
            if b not in cache:
                break
            k += 1
        hit_tokens += min(k * bs, length)
        for b in ids:
            if b in cache:
                cache.move_to_end(b)
            else:
                cache[b] = None
                if cap is not None and len(cache) > cap:
                    cache.popitem(last=False)
    return hit_tokens


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(median CPU s of this process, median wall s): CPU time is steadier on a shared machine."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(cpu), statistics.median(wall)


def mooncake(path: str, repeat: int) -> None:
    trace = load_mooncake(path)
    cols = stackdist.load_columns(path, block_size=trace.block_size)
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; {path}")
    print(
        f"{trace.num_requests:,} requests, {cols.num_accesses:,} block accesses, "
        f"{trace.num_unique_blocks:,} unique blocks"
    )
    two = (TierConfig("gpu", 10**6), TierConfig("host", 3 * 10**6))
    three = (*two, TierConfig("disk", 10**7))
    unlimited_host = (TierConfig("gpu", None), TierConfig("host", 3 * 10**6))
    cases: list[tuple[str, Callable[[], object], int]] = [
        ("load (tuples)", lambda: load_mooncake(path), repeat),
        ("load (columns)", lambda: stackdist.load_columns(path, block_size=512), repeat),
        ("replay-1tier", lambda: simulate(trace, SimConfig(tiers=(TierConfig("gpu", 3 * 10**6),))), repeat),
        ("replay-2tier", lambda: simulate(trace, SimConfig(tiers=two)), repeat),
        (
            "replay-2tier-exclusive",
            lambda: simulate(trace, SimConfig(tiers=two, hierarchy=EXCLUSIVE, write_policy=WRITE_BACK)),
            repeat,
        ),
        ("replay-3tier", lambda: simulate(trace, SimConfig(tiers=three)), repeat),
        ("replay-unlimited+host", lambda: simulate(trace, SimConfig(tiers=unlimited_host)), repeat),
        (
            "naive-4 (OrderedDict)",
            lambda: [naive_lru(trace.input_lengths, trace.blocks, BLOCK, c) for c in NAIVE_4],
            repeat,
        ),
        ("sweep-20 exact", lambda: lru_sweep(cols, SWEEP), repeat),
        (
            "sweep-20 sampled 1%",
            lambda: lru_sweep(cols, SWEEP, profile=stackdist.sampled_curve(cols, rate=0.01)),
            repeat,
        ),
        (
            "sweep-20 (20 replays)",
            lambda: [simulate(trace, SimConfig(tiers=(TierConfig("gpu", c),))) for c in SWEEP],
            1,
        ),
    ]
    results = {name: timed(fn, n) for name, fn, n in cases}
    base = results["naive-4 (OrderedDict)"][0]
    print(f"load average {os.getloadavg()[0]:.2f}; ratios use CPU time")
    print(f"{'case':<26}{'CPU s':>9}{'wall s':>9}{'÷ naive-4':>11}")
    for name, (cpu, wall) in results.items():
        print(f"{name:<26}{cpu:>9.3f}{wall:>9.3f}{cpu / base:>11.2f}")
    exact = lru_sweep(cols, SWEEP)
    naive = {c: naive_lru(trace.input_lengths, trace.blocks, BLOCK, c) for c in NAIVE_4}
    same = all(r.hit_tokens == naive[r.tiers[0].capacity_tokens] for r in lru_sweep(cols, NAIVE_4))
    sampled = lru_sweep(cols, SWEEP, profile=stackdist.sampled_curve(cols, rate=0.01))
    worst = max(abs(a.token_hit_rate - b.token_hit_rate) for a, b in zip(exact, sampled, strict=True))
    print(f"exact sweep hit tokens == naive OrderedDict at {NAIVE_4}: {same}")
    print(f"sampled 1 % vs exact, largest |token hit rate difference| over the 20 points: {worst:.4f}")


# --------------------------------------------------------------------------------------------------
# The synthetic scaling table


def synthetic_chunks(requests: int, seed: int = 0, block_size: int = BLOCK) -> Iterator[stackdist.Chunk]:
    """A seeded multi-turn trace, generated as a stream of request chunks (memory: one epoch of requests).

    Sessions of 1-3 turns start at 0.5 per request slot; turn gaps are exponential (mean 30 slots); half
    the sessions start with one of 100 shared system-prompt blocks (Zipf popularity); turn t sends the
    system block and the session's first t history blocks (dense ids from 100), the last one partial."""
    rng = np.random.default_rng(seed)
    epoch = 1 << 16
    made = emitted = sessions = 0
    next_id = 100
    # per pending request: time, its session's first history id, turn, system block (-1: none)
    carry = (np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32))
    e = 0
    while emitted < requests:
        when, sess, turn, system = carry
        if made < requests:
            turns = rng.integers(1, 4, size=epoch // 2)
            total = np.cumsum(turns)
            k = int(np.searchsorted(total, requests - made)) + 1
            turns = turns[:k]
            turns[-1] -= max(0, int(turns.sum()) - (requests - made))
            turns = turns[turns > 0]
            k = len(turns)
            start = e * epoch + rng.uniform(0, epoch, size=k)
            own = np.repeat(np.arange(k), turns)
            first = np.concatenate(([0], np.cumsum(turns)[:-1]))
            t_new = np.arange(int(turns.sum())) - np.repeat(first, turns)
            w_new = start[own] + t_new * rng.exponential(30.0, size=len(own))
            sys_new = np.where(rng.random(k) < 0.5, rng.zipf(1.5, size=k) % 100, -1)[own]
            base = next_id + np.concatenate(([0], np.cumsum(turns)[:-1]))  # dense: a session uses `turns` ids
            next_id += int(turns.sum())
            when = np.concatenate((when, w_new))
            sess = np.concatenate((sess, base[own]))
            turn = np.concatenate((turn, t_new.astype(np.int32)))
            system = np.concatenate((system, sys_new.astype(np.int32)))
            sessions += k
            made += len(own)
        order = np.argsort(when, kind="stable")
        when, sess, turn, system = when[order], sess[order], turn[order], system[order]
        cut = len(when) if made >= requests else int(np.searchsorted(when, (e + 1) * epoch))
        carry = (when[cut:], sess[cut:], turn[cut:], system[cut:])
        e += 1
        if cut == 0:
            continue
        sess_c, turn_c, sys_c = sess[:cut], turn[:cut], system[:cut]
        counts = 1 + turn_c.astype(np.int64) + (sys_c >= 0)
        rep = np.repeat(np.arange(cut), counts)
        offsets = np.zeros(cut + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        j = np.arange(int(offsets[-1])) - offsets[:-1][rep] - (sys_c[rep] >= 0)
        ids = np.where(j < 0, sys_c[rep], sess_c[rep] + j).astype(np.int32)
        lengths = counts * block_size - rng.integers(0, block_size, size=cut)
        emitted += cut
        yield stackdist.Chunk(offsets, lengths, ids)


def synthetic_columns(requests: int, seed: int = 0, block_size: int = BLOCK) -> stackdist.TraceColumns:
    """The whole synthetic trace in memory (for the exact curve and the replays)."""
    lengths, counts, ids = [], [], []
    for chunk in synthetic_chunks(requests, seed, block_size):
        lengths.append(chunk.input_lengths)
        counts.append(np.diff(chunk.offsets).astype(np.int32))
        ids.append(chunk.blocks)
    return stackdist.make_columns(
        np.concatenate(lengths), np.concatenate(counts), np.concatenate(ids), block_size=block_size,
        source=f"synthetic n={requests} seed={seed}",
    )  # fmt: skip


def _as_lists(cols: stackdist.TraceColumns) -> tuple[list[int], list[list[int]]]:
    flat = cols.blocks.tolist()
    offs = cols.offsets.tolist()
    return cols.input_lengths.tolist(), [flat[offs[r] : offs[r + 1]] for r in range(cols.num_requests)]


def child(case: str, requests: int, seed: int) -> None:
    """One case in this (fresh) process; prints one JSON line."""
    caps = SWEEP
    if case == "sampled":  # streamed: the trace is never held whole
        start, start_cpu = time.perf_counter(), time.process_time()
        curve = stackdist.sampled_curve_stream(synthetic_chunks(requests, seed), block_size=BLOCK, rate=0.01)
        seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        hits = [curve.at(c // BLOCK)[0] for c in caps]
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        print(json.dumps({
            "case": case, "requests": requests, "accesses": curve.accesses, "unique": None, "generate_s": 0.0,
            "seconds": seconds, "cpu_s": cpu, "peak_mb": own, "worker_peak_mb": 0, "input_tokens": curve.input_tokens,
            "hits": hits,
        }))  # fmt: skip
        return
    start = time.perf_counter()
    cols = synthetic_columns(requests, seed)
    made = time.perf_counter() - start
    start, start_cpu = time.perf_counter(), time.process_time()
    if case == "naive":
        lengths, blocks = _as_lists(cols)
        hits = [naive_lru(lengths, blocks, BLOCK, ONE_CAP)]
    elif case == "replay":
        lengths, blocks = _as_lists(cols)
        trace = Trace(BLOCK, tuple(lengths), (0,) * len(lengths), (0.0,) * len(lengths),
                      tuple(tuple(b) for b in blocks), cols.num_unique_blocks)  # fmt: skip
        hits = [simulate(trace, SimConfig(tiers=(TierConfig("gpu", ONE_CAP),))).hit_tokens]
    elif case == "exact":
        hits = [r.hit_tokens for r in lru_sweep(cols, caps)]
    elif case == "sharded-2":
        curve = stackdist.exact_curve(cols, shards=2, runner=stackdist.local_runner(2))
        hits = [r.hit_tokens for r in lru_sweep(cols, caps, profile=curve)]
    else:
        raise SystemExit(f"unknown case {case}")
    seconds = time.perf_counter() - start
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - start_cpu + workers.ru_utime + workers.ru_stime
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    print(json.dumps({
        "case": case, "requests": requests, "accesses": cols.num_accesses, "unique": cols.num_unique_blocks,
        "generate_s": made, "seconds": seconds, "cpu_s": cpu, "peak_mb": own, "worker_peak_mb": kids,
        "input_tokens": cols.input_tokens, "hits": hits,
    }))  # fmt: skip


def scale(sizes: list[int], seed: int, timeout: int) -> None:
    print(
        f"synthetic scaling, seed {seed}; each case in a fresh process; load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'requests':>11}{'accesses':>12}{'case':>11}{'gen s':>8}{'run s':>9}{'CPU s':>9}{'peak MB':>9}"
        f"{'workers MB':>11}{'CPU ÷ naive':>12}{'max |Δ| vs exact':>18}"
    )
    for n in sizes:
        rows: dict[str, dict[str, Any]] = {}
        for case in ("naive", "replay", "exact", "sampled", "sharded-2"):
            if case in ("naive", "replay") and n > NAIVE_LIMIT:
                continue
            try:
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", case, str(n), str(seed)],
                    capture_output=True, text=True, timeout=timeout, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                print(f"{n:>11,}{'':>12}{case:>11}  timed out after {timeout} s")
                continue
            if proc.returncode != 0:
                print(f"{n:>11,}{'':>12}{case:>11}  failed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows[case] = row
            naive = rows.get("naive")
            ratio = f"{row['cpu_s'] / naive['cpu_s']:.2f}" if naive else "-"
            delta = "-"
            if case in ("sampled", "sharded-2") and "exact" in rows:
                exact = rows["exact"]["hits"]
                delta = f"{max(abs(a - b) for a, b in zip(row['hits'], exact, strict=True)) / row['input_tokens']:.4f}"
            if case == "replay" and naive:
                delta = "same" if row["hits"][0] == naive["hits"][0] else "DIFFERS"
            if case == "exact" and naive:
                delta = "same" if row["hits"][10] == naive["hits"][0] else "DIFFERS"
            print(
                f"{n:>11,}{row['accesses']:>12,}{case:>11}{row['generate_s']:>8.1f}{row['seconds']:>9.2f}"
                f"{row['cpu_s']:>9.2f}"
                f"{row['peak_mb']:>9}{row['worker_peak_mb']:>11}{ratio:>12}{delta:>18}",
                flush=True,
            )


def errors(trace_dir: Path) -> None:
    """Largest |token hit rate difference| of the sampled curve vs exact over the 20 sweep points, seeds 0-4."""
    sets = [
        (name, stackdist.load_columns(str(trace_dir / f"{name}_trace.jsonl"), block_size=BLOCK))
        for name in ("conversation", "synthetic")
        if (trace_dir / f"{name}_trace.jsonl").exists()
    ]
    sets.append(("generated 1M", synthetic_columns(1_000_000)))
    caps = np.array([c // BLOCK for c in SWEEP])
    for name, cols in sets:
        exact = stackdist.exact_curve(cols)
        want = np.array([exact.at(int(c))[0] for c in caps]) / cols.input_tokens
        for rate in (0.01, 0.1):
            every, resolved, expected = [], [], []
            for seed in range(5):
                curve = stackdist.sampled_curve(cols, rate=rate, seed=seed)
                got = np.array([curve.at(int(c))[0] for c in caps]) / cols.input_tokens
                diff = np.abs(got - want)
                every.append(diff.max())
                resolved.append(diff[caps * rate >= 10].max())
                expected.append(max(curve.expected_error(int(c)) for c in caps))
            print(
                f"{name:<14} R={rate:<5} {cols.num_requests:>9,} requests {cols.num_unique_blocks:>9,} blocks  "
                f"all points {min(every):.4f}-{max(every):.4f}  R*C>=10 {min(resolved):.4f}-{max(resolved):.4f}  "
                f"largest expected {max(expected):.4f}",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace", default=str(DEFAULT_TRACE))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", default="", help="comma-separated synthetic sizes (requests)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=900, help="per case, seconds")
    parser.add_argument("--skip-mooncake", action="store_true")
    parser.add_argument("--errors", action="store_true", help="the sampled-vs-exact error table")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "N", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    if args.errors:
        errors(Path(args.trace).parent)
        return 0
    if not args.skip_mooncake:
        mooncake(args.trace, args.repeat)
    if args.scale:
        scale([int(float(x)) for x in args.scale.split(",")], args.seed, args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
