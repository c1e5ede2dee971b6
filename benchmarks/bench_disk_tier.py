"""Disk KV tier: vramctl's verified reads against `dd` reading the same file, in one run.

    python benchmarks/bench_disk_tier.py [--dir DIR] [--size 1GiB] [--block-bytes 2MiB] [--io-size 8MiB]
                                         [--repeat 7] [--checksum crc32]

For each method (O_DIRECT, and buffered with the file's pages dropped before every pass) it writes a file
of sealed KV blocks (fsync'd), then alternates, `--repeat` times:
- vramctl: `read_blocks` (large aligned reads, every block's header, trailer and checksum verified);
- dd: `dd if=FILE of=/dev/null bs=IO [iflag=direct]` (the baseline, same file, same request size);
- raw: the same reads without verification (how much the checks cost).
It prints medians and bests and the ratio vramctl / dd (target ≥ 80% for O_DIRECT, issue 5).
Results are recorded in docs/perf/tiers-bench.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vramctl.core.units import parse_bytes
from vramctl.tiers import disk_bench as db


def raw_read_s(path: Path, layout: db.BlockLayout, direct: bool) -> float:
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags)
    buf = db._aligned_buffer(layout.chunk_bytes)  # the same buffers vramctl reads into
    view = memoryview(buf)[: layout.chunk_bytes]
    try:
        start = time.perf_counter()
        for _, count, offset in layout.chunks():
            os.preadv(fd, [view[: count * layout.slot_bytes]], offset)
        return time.perf_counter() - start
    finally:
        view.release()
        os.close(fd)
        buf.close()


def drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        db.drop_file_pages(fd)
    finally:
        os.close(fd)


def gbps(nbytes: int, seconds: list[float]) -> tuple[float, float]:
    return nbytes / statistics.median(seconds) / 1e9, nbytes / min(seconds) / 1e9


def bench(directory: Path, layout: db.BlockLayout, method: str, repeat: int) -> dict[str, list[float]]:
    direct = method == db.DIRECT
    path = directory / f"bench-disk-tier-{os.getpid()}.{method}.kv"
    seq = 0xB0B
    times: dict[str, list[float]] = {"write": [], "vramctl": [], "dd": [], "raw": [], "cpu": [], "load": []}
    try:
        times["write"].append(db.write_blocks(path, layout, method=method, seq=seq))
        for rep in range(repeat):
            times["load"].append(os.getloadavg()[0])
            order = ("vramctl", "dd", "raw") if rep % 2 == 0 else ("dd", "raw", "vramctl")
            for what in order:
                if not direct:
                    drop(path)
                if what == "vramctl":
                    before = resource.getrusage(resource.RUSAGE_SELF)
                    stats = db.read_blocks(path, layout, method=method, seq=seq)
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    times["cpu"].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                    if stats.bad or stats.verified != layout.num_blocks:
                        sys.exit(f"verification failed: {stats.bad[:3]}")
                    times["vramctl"].append(stats.seconds)
                elif what == "dd":
                    run = db.run_dd(
                        path, io_bytes=layout.chunk_bytes, direct=direct, expect_bytes=layout.file_bytes
                    )
                    if run.seconds is None:
                        print(f"  dd: {run.error}")
                        continue
                    times["dd"].append(run.seconds)
                else:
                    times["raw"].append(raw_read_s(path, layout, direct))
    finally:
        path.unlink(missing_ok=True)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--size", default="1GiB")
    parser.add_argument("--block-bytes", default="2MiB", help="one Llama-3-8B KV block of 16 tokens = 2 MiB")
    parser.add_argument("--io-size", default="8MiB")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--checksum", default="crc32", choices=db.CHECKSUMS)
    parser.add_argument("--methods", default="direct,buffered")
    args = parser.parse_args()

    block = parse_bytes(args.block_bytes, what="--block-bytes")
    size = parse_bytes(args.size, what="--size")
    layout = db.BlockLayout(
        block_bytes=block,
        num_blocks=max(1, size // block),
        checksum=args.checksum,
        io_bytes=parse_bytes(args.io_size, what="--io-size"),
    )
    directory = db.check_directory(args.dir, layout.file_bytes)
    print(
        f"disk tier bench: {layout.num_blocks} blocks × {layout.block_bytes} B = {layout.file_bytes / 2**30:.2f} GiB "
        f"in {directory} ({db.filesystem_of(directory)}), {layout.chunk_bytes} B per I/O, {layout.checksum}, "
        f"{args.repeat} interleaved passes, {db.default_workers()} checksum thread(s)"
    )
    print(f"host: {platform.platform()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    status = 0
    for method in args.methods.split(","):
        times = bench(directory, layout, method, args.repeat)
        w_med, _ = gbps(layout.file_bytes, times["write"])
        ours_med, ours_best = gbps(layout.file_bytes, times["vramctl"])
        raw_med, raw_best = gbps(layout.file_bytes, times["raw"])
        print(f"\n{method}: write+fsync {w_med:.2f} GB/s")
        print(f"  vramctl read+verify  median {ours_med:.2f} GB/s  best {ours_best:.2f} GB/s")
        cpu_per_gb = statistics.median(times["cpu"]) / (layout.file_bytes / 1e9)
        print(
            f"  vramctl CPU time (all threads) {cpu_per_gb:.2f} s per GB read+verified; "
            f"load average during the passes {min(times['load']):.2f}-{max(times['load']):.2f}"
        )
        print(f"  raw read (no verify) median {raw_med:.2f} GB/s  best {raw_best:.2f} GB/s")
        if times["dd"]:
            dd_med, dd_best = gbps(layout.file_bytes, times["dd"])
            flag = " iflag=direct" if method == db.DIRECT else " (pages dropped first)"
            print(f"  dd{flag:<24} median {dd_med:.2f} GB/s  best {dd_best:.2f} GB/s")
            ratio = ours_med / dd_med
            print(f"  vramctl / dd: median {ratio:.0%}, best {ours_best / dd_best:.0%}")
            if method == db.DIRECT:
                verdict = "met" if ratio >= 0.8 else "NOT met"
                print(f"  target vramctl O_DIRECT read ≥ 80% of dd iflag=direct: {verdict}")
                status = status or (0 if ratio >= 0.8 else 1)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return status


if __name__ == "__main__":
    sys.exit(main())
