#!/usr/bin/env python3
"""Score `read-log` and `read-log --compare-plan` on a held-out set of real start-up logs.

    python scripts/eval_startup.py --logs DIR [--configs CDIR] [--index tests/fixtures/startup_eval/index.yaml]
        [--json OUT]

DIR holds the logs the index names (`log_file`); they are third-party text and stay outside the repository.
CDIR (optional) holds checkpoint configs, one folder per checkpoint (`CDIR/<plan.model_dir>/config.json`, with the
checkpoint's quantisation files where its format needs them), also kept outside the repository: a point whose
`plan:` names a `model_dir:` instead of a bundled `model:` is planned from that folder, as
`vramctl plan --model PATH` plans a local checkpoint. Without `--configs` (or without the folder) such a point
counts as not planned, with the index's `why:`.
For every datapoint:

- read-log recovery: how many of the numbers under `logged:` read-log recovers (scripts/readlog_recovery.py's
  rule: within the rounding of the printed number);
- when the index gives `plan:` (a model and a card): `vramctl read-log LOG --compare-plan --json` with that
  model and card, and the planned KV cache and weights against the logged ones (|error| in GiB);
- otherwise the reason it cannot be planned (`why:`), or the one line vramctl printed when planning failed.

Never used to fit anything: it judges the committed constants.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30
sys.path.insert(0, str(ROOT / "scripts"))

from readlog_recovery import FIELDS, _first_number, _tolerance, _values  # noqa: E402

from vramctl.diagnose.reader import iter_log_lines  # noqa: E402
from vramctl.diagnose.startup import parse_startup_log  # noqa: E402


def recovery(log: Path, logged: dict[str, Any]) -> tuple[int, int, list[str]]:
    """scripts/readlog_recovery.py's rule for one log: (recovered, logged, what was missed)."""
    lines = list(iter_log_lines(log))
    first = parse_startup_log(lines)
    reports = [first] + [
        parse_startup_log(lines, run=i) for i in range(len(getattr(first, "runs", ()) or ()))
    ]
    found = total = 0
    missed: list[str] = []
    for key, (fact, unit) in FIELDS.items():
        if logged.get(key) is None:
            continue
        parsed = _first_number(logged[key])
        if parsed is None:
            continue
        number, raw = parsed
        want = number * (GiB if unit == "GiB" else 1)
        tol = max(_tolerance(raw, unit), 0.005 * abs(want))
        total += 1
        if any(abs(v - want) <= tol + 1 for rep in reports for v in _values(rep, fact)):
            found += 1
        else:
            missed.append(f"{key} = {logged[key]}")
    return found, total, missed


REGISTRY = "registry"
CONFIG_FOLDER = "config.json folder"


def plan_source(point: dict[str, Any], configs: Path | None) -> tuple[str | None, str]:
    """Where a point's model comes from: (source, model argument) or (None, why it cannot be planned).

    `plan.model` is a bundled (registry) name; `plan.model_dir` a folder under `--configs` holding the checkpoint's
    config.json. A point with neither, or whose folder is absent, is not planned and says why.
    """
    plan = point.get("plan") or {}
    why = str(point.get("why", "no plan mapping"))
    if plan.get("model"):
        return REGISTRY, str(plan["model"])
    if plan.get("model_dir"):
        if configs is None:
            return None, why
        folder = configs / str(plan["model_dir"])
        if not (folder / "config.json").is_file():
            return None, f"{why}; no config.json in --configs folder {plan['model_dir']!r}"
        return CONFIG_FOLDER, str(folder)
    return None, why


def compare(log: Path, plan: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "vramctl", "read-log", str(log), "--compare-plan", "--json"]
    if model or plan.get("model"):
        cmd += ["--model", str(model or plan["model"])]
    if plan.get("gpu_memory") is not None:
        cmd += ["--gpu-memory", str(plan["gpu_memory"])]
    elif plan.get("gpu"):
        cmd += ["--gpu", str(plan["gpu"])]
    if plan.get("version"):  # the version the thread states where the log excerpt does not
        cmd += ["--engine-version", str(plan["version"])]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    data = json.loads(proc.stdout)
    comp = data.get("comparison") or {}
    rows = {r["name"]: r for r in comp.get("rows", [])}
    if not rows:
        reason = "; ".join(comp.get("notes", []) or data.get("notes", [])[:1]) or "no plan"
        return {"error": reason}
    out: dict[str, Any] = {}
    for name in ("kv_cache", "weights", "activation_peak", "non_torch", "cuda_graph"):
        row = rows.get(name)
        if row and row.get("logged") is not None and row.get("planned") is not None:
            out[name] = (row["logged"] / GiB, row["planned"] / GiB)
    kv_row, tok_row = rows.get("kv_cache") or {}, rows.get("kv_tokens") or {}
    if "kv_cache" not in out and kv_row.get("planned") and tok_row.get("logged") and tok_row.get("planned"):
        # The log gives the pool in tokens only (V1 "GPU KV cache size: N tokens"): in bytes at the plan's own
        # bytes per token, which is exact for the layout the plan and the engine share.
        per_token = kv_row["planned"] / tok_row["planned"]
        out["kv_cache"] = (tok_row["logged"] * per_token / GiB, kv_row["planned"] / GiB)
        out["kv_from_tokens"] = True
    if "kv_cache" not in out and rows.get("kv_cache", {}).get("planned") is None:
        out["error"] = "no planned KV (" + "; ".join(comp.get("notes", [])[:1]) + ")"
    return out


def _print_errors(errors: list[tuple[float, str]], ids: set[str], what: str, unit: str) -> None:
    """One line: the median and the worst (with its point) of the errors of the points in `ids`."""
    mine = [(e, pid) for e, pid in errors if pid in ids]
    if not mine:
        return
    worst = max(mine)
    median = statistics.median([e for e, _ in mine])
    print(f"   {what.format(n=len(mine))}: median {unit.format(median)}, worst {unit.format(worst[0])} ({worst[1]})")


def _summary(
    split: str,
    ids: set[str],
    kv_err: list[tuple[float, str]],
    w_err: list[tuple[float, str]],
    unplanned: list[str],
    sources: dict[str, str],
) -> None:
    """One split's numbers: KV and weights |error| on the planned points, and what could not be planned."""
    planned = [pid for pid in ids if pid in sources and not any(u.split(":", 1)[0] == pid for u in unplanned)]
    by_source = {src: sum(1 for pid in planned if sources[pid] == src) for src in (REGISTRY, CONFIG_FOLDER)}
    print(
        f"-- {split}: {len(ids)} start-ups, {len(ids) - len(unplanned)} planned "
        f"({by_source[REGISTRY]} from the registry, {by_source[CONFIG_FOLDER]} from a config.json folder), "
        f"{len(unplanned)} not planned"
    )
    _print_errors(kv_err, ids, "KV cache |error| on {n} planned with a logged KV", "{:.2f} GiB")
    _print_errors(w_err, ids, "weights |error| on {n}", "{:.1f} %")
    for line in unplanned:
        print("     " + line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--index", type=Path, default=ROOT / "tests/fixtures/startup_eval/index.yaml")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--configs",
        type=Path,
        default=None,
        help="folder of checkpoint configs: plans points whose plan names a model_dir from CONFIGS/<model_dir>",
    )
    args = parser.parse_args(argv)
    index = yaml.safe_load(args.index.read_text())
    found = total = 0
    kv_err: list[tuple[float, str]] = []
    w_err: list[tuple[float, str]] = []
    unplanned: list[str] = []
    sources: dict[str, str] = {}
    result: dict[str, Any] = {"points": {}}
    for point in index["datapoints"]:
        pid = point["id"]
        log = args.logs / point["log_file"]
        f, t, missed = recovery(log, point.get("logged") or {})
        found += f
        total += t
        entry: dict[str, Any] = {"recovered": [f, t], "missed": missed}
        plan = point.get("plan") or {}
        source, model = plan_source(point, args.configs)
        if source is None:
            unplanned.append(f"{pid}: {model}")
        else:
            sources[pid] = source
            entry["source"] = source
            res = compare(log, plan, model)
            entry["compare"] = {k: v for k, v in res.items()}
            if "kv_cache" in res:
                logged, planned = res["kv_cache"]
                kv_err.append((abs(planned - logged), pid))
            if "weights" in res:
                logged, planned = res["weights"]
                w_err.append((abs(planned - logged) / abs(logged) * 100, pid))
            if "error" in res and "kv_cache" not in res and "weights" not in res:
                unplanned.append(f"{pid}: could not be planned: {res['error']}")
        result["points"][pid] = entry
        print(f"{pid}: read-log {f}/{t}" + (f" missed {missed}" if missed else ""), end="")
        if "compare" in entry:
            c = entry["compare"]
            parts = [
                f"{k}{' (from tokens)' if k == 'kv_cache' and c.get('kv_from_tokens') else ''} "
                f"logged {v[0]:.2f} planned {v[1]:.2f}"
                for k, v in c.items()
                if isinstance(v, tuple)
            ]
            print(" | " + "; ".join(parts) + (f" | {c['error']}" if "error" in c else ""), end="")
        print()
    print()
    print(f"read-log recovered {found} of {total} logged numbers ({100 * found / max(1, total):.1f} %)")
    split_of = {p["id"]: p.get("split", "heldout") for p in index["datapoints"]}
    for split in ("heldout", "dev"):
        ids = {pid for pid, sp in split_of.items() if sp == split}
        if ids:
            _summary(split, ids, kv_err, w_err, [u for u in unplanned if u.split(":", 1)[0] in ids], sources)
    result.update(
        recovered=[found, total],
        sources=sources,
        kv_abs_error_gib={pid: e for e, pid in kv_err},
        weights_abs_error_pct={pid: e for e, pid in w_err},
        unplanned=unplanned,
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=list) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
