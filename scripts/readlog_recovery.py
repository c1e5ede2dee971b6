#!/usr/bin/env python3
"""How many of the numbers a start-up log prints does `read-log` recover?

    python scripts/readlog_recovery.py --samples DIR    # DIR holds index.yaml + NNN.log (the start-up samples)

Each datapoint of `index.yaml` lists, under `logged:`, the numbers its log prints (as a person read them). For
each field with a read-log fact, the log is parsed (every engine start in it, as `--run N` would) and the
number counts as recovered when some run has that fact within the logged number's rounding (half a unit of its
last printed digit, or 0.5 % for sums a person restated). Prints the recovery per field and overall, and lists
what was missed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from vramctl.diagnose.reader import iter_log_lines
from vramctl.diagnose.startup import parse_startup_log

GiB = 2**30
NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?")

FIELDS: dict[str, tuple[str, str]] = {
    # index.yaml field → (read-log fact, unit of the logged number)
    "available_kv_gib": ("kv_cache", "GiB"),
    "weights_loading_took": ("weights_loaded", "GiB"),
    "weights_gib": ("weights", "GiB"),
    "non_torch_gib": ("non_torch", "GiB"),
    "peak_activation_gib": ("activation_peak", "GiB"),
    "cudagraph_gib": ("cuda_graph_actual", "GiB"),
    "num_gpu_blocks": ("num_gpu_blocks", "count"),
    "num_cpu_blocks": ("num_cpu_blocks", "count"),
    "max_concurrency": ("max_concurrency", "count"),
    "kv_tokens": ("kv_tokens", "count"),
    "total_gpu_memory_gib": ("total_memory", "GiB"),
    "usable_gib": ("requested_memory", "GiB"),
    "load_weight_begin_avail_gb": ("load_begin_avail", "GiB"),
    "load_weight_end_avail_gb": ("load_end_avail", "GiB"),
    "memory_pool_end_avail_gb": ("pool_end_avail", "GiB"),
    "max_total_num_tokens": ("max_total_num_tokens", "count"),
    "k_size_gb": ("k_size", "GiB"),
    "v_size_gb": ("v_size", "GiB"),
    "kv_cache_in_use_gib": ("kv_cache_in_use", "GiB"),
    "peak_activation_incl_graph_gib": ("peak_activation_incl_graph", "GiB"),
    "kv_tokens_capacity": ("kv_tokens_capacity", "count"),
}


def _first_number(value: Any) -> tuple[float, str] | None:
    text = str(value)
    match = NUM.search(text)
    if match is None:
        return None
    raw = match.group(0).replace(",", "")
    return float(raw), raw


def _tolerance(raw: str, unit: str) -> float:
    decimals = len(raw.split(".", 1)[1]) if "." in raw else 0
    half = 0.5 * 10**-decimals
    return half * (GiB if unit == "GiB" else 1)


def _values(report: Any, fact: str) -> list[float]:
    return [float(o.value) for o in report.observations if o.key == fact]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=Path, required=True)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    index = yaml.safe_load((args.samples / "index.yaml").read_text())
    found = total = 0
    per_field: dict[str, list[int]] = {}
    missed: list[str] = []
    for point in index.get("datapoints", []):
        logged = point.get("logged") or {}
        log = args.samples / str(point.get("log_file", ""))
        if not log.is_file():
            continue
        lines = list(iter_log_lines(log))
        first = parse_startup_log(lines)
        reports = [first]
        for run in range(len(getattr(first, "runs", ()) or ())):
            reports.append(parse_startup_log(lines, run=run))
        for field, (fact, unit) in FIELDS.items():
            if logged.get(field) is None:
                continue
            parsed = _first_number(logged[field])
            if parsed is None:
                continue
            number, raw = parsed
            want = number * (GiB if unit == "GiB" else 1)
            tol = max(_tolerance(raw, unit), 0.005 * abs(want))
            ok = any(abs(v - want) <= tol + 1 for rep in reports for v in _values(rep, fact))
            per_field.setdefault(field, [0, 0])
            per_field[field][1] += 1
            total += 1
            if ok:
                per_field[field][0] += 1
                found += 1
            else:
                missed.append(f"{point.get('id')}: {field} = {logged[field]!r}")
    for field, (hit, count) in sorted(per_field.items(), key=lambda kv: -kv[1][1]):
        print(f"{field:28s} {hit:3d} / {count:3d}")
    share = 100 * found / total if total else 0.0
    print(f"recovered {found} of {total} logged numbers ({share:.1f} %)")
    if args.verbose:
        for line in missed:
            print("  missed", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
