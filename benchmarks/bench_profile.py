"""`vramctl profile` of a tiny model on the cpu device, end to end, against `python -c "import torch"`.

The issue's speed claim for CI: "a tiny model profiles end to end in seconds". The floor under any
measurement with torch is importing it, so the baseline is a fresh `python -c "import torch"`; the
command under test is a fresh `vramctl profile profiles/measured/tiny-llama --device cpu --device-memory
1GiB --dtype float32 --json` (vLLM's CPU defaults: 2048 batched tokens over 128 sequences, plus the
sampler), and `vramctl suggest --from-profile` (no torch import). Runs are interleaved so that a busy
shared machine slows both alike; the medians and the ratio are reported, with the profile's own
`wall_seconds` (device open → result) and phase times from its JSON.

Usage: python benchmarks/bench_profile.py [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = "profiles/measured/tiny-llama"
PROFILE = [TINY, "--device", "cpu", "--device-memory", "1GiB", "--dtype", "float32", "--json"]


def _vramctl(*args: str) -> list[str]:
    return [sys.executable, "-c", "from vramctl.cli.main import entry; entry()", *args]


def _timed(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"bench_profile: {' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()[-400:]}"
        )
    return elapsed, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    baseline: list[float] = []
    profile: list[float] = []
    suggest: list[float] = []
    walls: list[float] = []
    phases: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        saved = os.path.join(tmp, "tiny.json")
        for _ in range(args.repeat):
            baseline.append(_timed([sys.executable, "-c", "import torch"])[0])
            secs, out = _timed(_vramctl("profile", *PROFILE, "--save", saved))
            profile.append(secs)
            result = json.loads(out)
            walls.append(float(result["wall_seconds"]))
            for name, value in result["measurements"]["ranks"][0]["phase_seconds"].items():
                phases.setdefault(name, []).append(float(value))
            suggest.append(_timed(_vramctl("suggest", "--from-profile", saved, "--json"))[0])

    med = statistics.median
    report = {
        "repeat": args.repeat,
        "import_torch_s": round(med(baseline), 3),
        "profile_s": round(med(profile), 3),
        "profile_over_import_torch": round(med(profile) / med(baseline), 2),
        "profile_wall_seconds": round(med(walls), 3),
        "phase_seconds": {k: round(med(v), 3) for k, v in phases.items()},
        "suggest_from_profile_s": round(med(suggest), 3),
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"python -c 'import torch'      {report['import_torch_s']:.2f} s (median of {args.repeat})")
    print(
        f"vramctl profile (tiny, cpu)   {report['profile_s']:.2f} s = "
        f"{report['profile_over_import_torch']:.2f}x import torch; measurement {report['profile_wall_seconds']:.2f} s"
    )
    print("  phases: " + ", ".join(f"{k} {v:.3f} s" for k, v in report["phase_seconds"].items()))
    print(f"vramctl suggest --from-profile {report['suggest_from_profile_s']:.2f} s (no torch import)")
    print(f"machine: {report['cpu_count']} cores, load average {report['load_average']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
