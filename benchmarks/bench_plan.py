#!/usr/bin/env python3
"""How long `vramctl plan --json` takes, against a bare `python -c 'import typer, rich'`.

    python benchmarks/bench_plan.py [--runs 15] [--cores 0,1]

Each command runs as a fresh subprocess (what a user or CI pays), `--runs` times, alternating with the baseline;
the report gives the median wall time of each and their ratio. `--cores` pins both to CPUs with `taskset`
(the CI machine has 2 cores). Also checks that the plan process never imported torch.

The children run with Python's bytecode cache on (PYTHONDONTWRITEBYTECODE removed from their environment), as
an installed package runs: with it set, every run recompiles every module from source (~50 ms more here).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

PLAN = [
    sys.executable,
    "-c",
    "import sys; from vramctl.cli.main import main; code = main(['plan', '--json']); "
    "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(code)",
]
PLAN_BOTH = [sys.executable, "-m", "vramctl.cli.main", "plan", "--engine", "both", "--json"]
PLAN_FIXES = [
    sys.executable,
    "-m",
    "vramctl.cli.main",
    "plan",
    "Qwen/Qwen3-8B",
    "--gpu",
    "rtx-4090",
    "--max-model-len",
    "40960",
    "--json",
]
"""A plan that does not fit (exit 1): the pessimistic and optimistic edges plus the fix search, each fix planned."""
PLAN_ONLY_CODE = (
    "import sys, typer\n"
    "from vramctl.cli import plan\n"
    "app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)\n"
    "app.callback()(lambda: None)\n"
    "plan.register(app)\n"
    "try:\n"
    "    app(args=['plan', '--json'], prog_name='vramctl')\n"
    "except SystemExit as exc:\n"
    "    assert 'torch' not in sys.modules\n"
    "    sys.exit(exc.code)\n"
)
PLAN_ONLY = [sys.executable, "-c", PLAN_ONLY_CODE]
"""The plan command alone in a typer app: what `vramctl plan` costs when the other commands import lazily."""
BASELINE = [sys.executable, "-c", "import typer, rich"]
TYPER_FLOOR_CODE = (
    "import sys, typer\n"
    "app = typer.Typer(add_completion=False)\n"
    "@app.command()\n"
    "def hello(name: str = typer.Option('x', '--name')) -> None:\n"
    "    print(name)\n"
    "try:\n"
    "    app(args=['--name', 'y'])\n"
    "except SystemExit as exc:\n"
    "    sys.exit(exc.code)\n"
)
TYPER_FLOOR = [sys.executable, "-c", TYPER_FLOOR_CODE]
"""A one-option typer command, invoked: this typer (0.29) coerces parameters through pydantic, ~0.1-0.2 s that
`import typer, rich` alone does not pay."""
PYTHON = [sys.executable, "-c", "pass"]


CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], prefix: list[str], ok: tuple[int, ...] = (0,)) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [*prefix, *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, env=CHILD_ENV
    )
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--cores", default=None, help="e.g. 0,1: pin with taskset")
    args = parser.parse_args(argv)
    prefix: list[str] = []
    if args.cores:
        if shutil.which("taskset") is None:
            raise SystemExit("--cores needs taskset")
        prefix = ["taskset", "-c", args.cores]
    for cmd in (PLAN, BASELINE):  # warm the file cache
        timed(cmd, prefix)
    results: dict[str, list[float]] = {
        "plan": [],
        "plan_only": [],
        "typer_floor": [],
        "plan_both": [],
        "plan_fixes": [],
        "baseline": [],
        "python": [],
    }
    for _ in range(args.runs):
        results["python"].append(timed(PYTHON, prefix))
        results["baseline"].append(timed(BASELINE, prefix))
        results["typer_floor"].append(timed(TYPER_FLOOR, prefix))
        results["plan"].append(timed(PLAN, prefix))
        results["plan_only"].append(timed(PLAN_ONLY, prefix))
        results["plan_both"].append(timed(PLAN_BOTH, prefix))
        results["plan_fixes"].append(timed(PLAN_FIXES, prefix, ok=(1,)))
    med = {k: statistics.median(v) for k, v in results.items()}
    base = med["baseline"]
    print(f"runs: {args.runs} each{' on cores ' + args.cores if args.cores else ''}; median wall time")
    rows = [
        ("python -c pass", "python"),
        ("python -c 'import typer, rich'  (baseline)", "baseline"),
        ("a one-option typer command, run", "typer_floor"),
        ("plan command alone (lazy CLI)", "plan_only"),
        ("vramctl plan --json", "plan"),
        ("vramctl plan --engine both --json", "plan_both"),
        ("a failing plan with its fixes (exit 1)", "plan_fixes"),
    ]
    for label, key in rows:
        print(f"  {label:45s} {med[key] * 1000:7.1f} ms  {med[key] / base:5.2f}x baseline")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
