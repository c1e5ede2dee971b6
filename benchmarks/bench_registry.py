"""How long the registry takes to answer, in a fresh process (cold caches), against `import yaml` alone.

Run: python benchmarks/bench_registry.py [--runs N]
Each scenario runs N fresh interpreters; we report the median wall time of the whole process and the
median time of the call itself (measured inside the process, after imports).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

SCENARIOS = {
    "baseline: import yaml": ("import yaml", "pass"),
    "import vramctl.registry": ("import vramctl.registry", "pass"),
    "load_model('llama-3-8b-instruct') (file-stem fast path)": (
        "from vramctl.registry import load_model",
        "load_model('llama-3-8b-instruct')",
    ),
    "load_model('llama-3-8b') (alias index over all profiles)": (
        "from vramctl.registry import load_model",
        "load_model('llama-3-8b')",
    ),
    "load_model(HF id) (alias index over all profiles)": (
        "from vramctl.registry import load_model",
        "load_model('meta-llama/Meta-Llama-3-8B-Instruct')",
    ),
    "load_gpu('NVIDIA H100 80GB HBM3') (index)": (
        "from vramctl.registry import load_gpu",
        "load_gpu('NVIDIA H100 80GB HBM3')",
    ),
    "list_models() (every model profile)": ("from vramctl.registry import list_models", "list_models()"),
    "unknown name with suggestions": (
        "from vramctl.registry import load_model",
        "exec('try:\\n load_model(\"llama-9\")\\nexcept Exception: pass')",
    ),
}


def run(setup: str, call: str) -> tuple[float, float]:
    code = f"import time\n{setup}\nt = time.perf_counter()\n{call}\nprint(time.perf_counter() - t)"
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    base = None
    print(f"{'scenario':55s} {'process ms':>10s} {'call ms':>8s} {'vs baseline':>11s}")
    for label, (setup, call) in SCENARIOS.items():
        results = [run(setup, call) for _ in range(args.runs)]
        wall = statistics.median(r[0] for r in results)
        inner = statistics.median(r[1] for r in results)
        base = base or wall
        print(f"{label:55s} {wall * 1000:10.1f} {inner * 1000:8.2f} {wall / base:10.2f}x")


if __name__ == "__main__":
    main()
