"""read-log speed and memory on a large generated server log (the start-up lines near the end).

Generates a log of --size-mib MiB: request-serving noise lines in vLLM's format with the prefixes real
multi-process servers add, then a complete 0.10.2-style start-up section (from samples/startup/051.log)
near the end. Measures, in one process each:
  - `grep -E` over the file with the format table's key phrases (the baseline, a C scanner),
  - `vramctl read-log --json` (streaming reader + parser),
and reports wall time, the ratio to grep, throughput, and the peak RSS of each child process.

    python benchmarks/bench_read_log.py --size-mib 256
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "samples" / "startup" / "051.log"

NOISE = [
    "(APIServer pid=3021) INFO 09-23 18:20:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {a:.1f} "
    "tokens/s, Avg generation throughput: {b:.1f} tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache "
    "usage: {u:.1f}%, Prefix cache hit rate: {h:.1f}%",
    '(APIServer pid=3021) INFO:     10.0.0.{r}:5{s:04d} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(EngineCore_DP0 pid=3021) DEBUG 09-23 18:20:{s:02d} [core.py:{r}] EngineCore loop active, {r} requests",
]


def generate(path: Path, size_mib: int) -> None:
    rng = random.Random(0)
    target = size_mib << 20
    startup = SAMPLE.read_text()
    written = 0
    with path.open("w") as fh:
        while written < target * 0.9:
            chunk = (
                "\n".join(
                    rng.choice(NOISE).format(
                        s=rng.randrange(60),
                        a=rng.random() * 9e3,
                        b=rng.random() * 5e3,
                        r=rng.randrange(1, 256),
                        u=rng.random() * 100,
                        h=rng.random() * 100,
                    )
                    for _ in range(2000)
                )
                + "\n"
            )
            fh.write(chunk)
            written += len(chunk)
        fh.write(startup)
        while written < target:
            chunk = "\n".join(
                rng.choice(NOISE).format(s=1, a=1.0, b=1.0, r=1, u=1.0, h=1.0) for _ in range(2000)
            )
            fh.write(chunk + "\n")
            written += len(chunk) + 1


def timed(argv: list[str]) -> tuple[float, int, int]:
    """(seconds, peak RSS KiB of the child, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return elapsed, max(peak, before), proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    from vramctl.diagnose.startup_formats import ALL_FORMATS

    tmp = Path(tempfile.mkdtemp(prefix="vramctl-bench-"))
    log = tmp / "server.log"
    generate(log, args.size_mib)
    size = log.stat().st_size
    phrases = sorted({fmt.needle for fmt in ALL_FORMATS})
    grep = shutil.which("grep")
    assert grep is not None
    pattern = "|".join(re.escape(p) for p in phrases)
    g_time, _, _ = timed([grep, "-E", "-c", pattern, str(log)])
    exe = shutil.which("vramctl") or sys.executable
    argv = (
        [exe, "read-log", str(log), "--json"]
        if exe.endswith("vramctl")
        else [sys.executable, "-m", "vramctl.cli.main", "read-log", str(log), "--json"]
    )
    r_time, r_rss, code = timed(argv)
    print(f"log: {size / 2**20:.0f} MiB, {sum(1 for _ in log.open('rb')):,} lines")
    print(f"grep -E ({len(phrases)} phrases): {g_time:.2f} s")
    print(
        f"vramctl read-log --json:        {r_time:.2f} s (exit {code}), {size / 2**20 / r_time:.0f} MiB/s, "
        f"{r_time / g_time:.1f}x grep, peak RSS {r_rss / 1024:.0f} MiB"
    )
    if not args.keep:
        shutil.rmtree(tmp)
    else:
        print(f"kept {log}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
