#!/usr/bin/env python3
"""Score `read-log` and `read-log --compare-plan` on a held-out set of real start-up logs.

    python scripts/eval_startup.py [--logs DIR] [--configs CDIR] [--index tests/fixtures/startup_eval/index.yaml]
        [--json OUT]

Without `--logs` (the logs are not at hand): the read-log recovery part is skipped, and each point is planned with
`vramctl plan --json` from the index's own fields (model, card, tp, max_model_len, gpu_memory_utilization,
max_num_seqs, enforce_eager, engine and version) and scored against the index's `logged:` numbers (available KV in
GiB, or KV tokens at the plan's bytes per token, V0's `gpu_blocks` counted as blocks of 16 tokens unless the
index gives `block_size:`; weights). Flags only the log shows (a KV dtype, speculative decoding,
…) are then unknown, so these numbers are comparable with each other, not with a run with the logs. A point whose
`plan:` names no card (`gpu` / `gpu_memory`) is counted as not planned in this mode (vramctl's default card would be
compared with a log from another card).

A point whose `plan:` names a `checkpoint:` (a Hub name) and that has no config folder is planned through the registry's
name fall-back (vramctl/registry/derived.py: a bundled base + the quantisation its name implies, with HF_HUB_OFFLINE=1)
when the name allows, and reported on its own line ("planned from a derived base") so the other numbers stay
comparable.

Held-out points are reported only in aggregate (counts, median and worst |error|, never per point); dev points are
listed one by one.

DIR holds the logs the index names (`log_file`); they are third-party text and stay outside the repository. A point
whose log is not in DIR is planned from the index's fields (as without `--logs`) and counted.
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
import re
import shlex
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
DERIVED = "derived base"
SOURCES = (REGISTRY, CONFIG_FOLDER, DERIVED)


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
        folder = configs / str(plan["model_dir"]) if configs is not None else None
        if folder is not None and (folder / "config.json").is_file():
            return CONFIG_FOLDER, str(folder)
        if plan.get("checkpoint") and derivable(str(plan["checkpoint"])):
            return DERIVED, str(plan["checkpoint"])
        if folder is None:
            return None, why
        return None, f"{why}; no config.json in --configs folder {plan['model_dir']!r}"
    return None, why


def derivable(checkpoint: str) -> bool:
    """The registry's name fall-back plans this checkpoint from a bundled base (vramctl/registry/derived.py)."""
    try:
        from vramctl.registry.derived import derive_from_name
    except ImportError:  # an older vramctl without the fall-back
        return False
    return derive_from_name(checkpoint, "eval") is not None


PLANNED = (0, 1)
"""`vramctl plan` exit codes with a plan on stdout: fits, does not fit (docs/exit-codes.md)."""
_VERSION = re.compile(r"\b(\d+\.\d+(?:\.\d+)?)(?![x\d])")  # not "0.2x" (a series, no version)


def stated_flags(point: dict[str, Any]) -> list[str]:
    """The vLLM flags of the settings the index states for a point (from the thread's command or text)."""
    words: list[str] = []
    for key, flag in (
        ("tp", "--tensor-parallel-size"),
        ("max_model_len", "--max-model-len"),
        ("gpu_memory_utilization", "--gpu-memory-utilization"),
        ("max_num_seqs", "--max-num-seqs"),
    ):
        if point.get(key) is not None:
            words += [flag, str(point[key])]
    if point.get("enforce_eager"):
        words += ["--enforce-eager"]
    if point.get("entrypoint") and point.get("engine") != "sglang":
        # the offline LLM class has its own scheduler defaults (`_set_default_args_v1`, [0.8.5]
        # vllm/engine/arg_utils.py:1596-1621): a run through it is planned as one
        words += ["--entrypoint", str(point["entrypoint"])]
    return words



def _stated_version(plan: dict[str, Any], point: dict[str, Any]) -> str:
    """The vLLM version to plan with: the plan mapping's, else the index's `version:` field (what the thread or the
    log states; SGLang points keep their latest)."""
    version = str(plan.get("version") or "")
    if not version and point.get("engine") != "sglang":
        found = _VERSION.search(str(point.get("version") or ""))
        version = found.group(1) if found else ""
    return version

def plan_only(point: dict[str, Any], plan: dict[str, Any], model: str) -> dict[str, Any]:
    """Without the log: `vramctl plan --json` from the index's fields, scored against its `logged:` numbers.

    A point whose `plan:` names no card (neither `gpu` nor `gpu_memory`) is not planned here: vramctl would plan it on
    its default card, whose total has nothing to do with the log's (`read-log --compare-plan` takes the card from the
    log instead)."""
    if not plan.get("gpu") and plan.get("gpu_memory") is None:
        return {"error": "no card in the index (without the log the card is unknown; read-log reads it from the log)"}
    cmd = [sys.executable, "-m", "vramctl", "plan", "--json", "--model", model]
    if plan.get("gpu_memory") is not None:
        cmd += ["--gpu-memory", f"{plan['gpu_memory']}GiB"]
    if plan.get("gpu"):
        cmd += ["--gpu", str(plan["gpu"])]
    if point.get("engine") == "sglang":
        cmd += ["--engine", "sglang"]
    cmd += stated_flags(point)
    version = _stated_version(plan, point)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    attempts = [[*cmd, "--engine-version", version], cmd] if version else [cmd]
    proc = None
    for attempt in attempts:
        proc = subprocess.run(attempt, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
        if proc.returncode in PLANNED:
            break
    assert proc is not None
    if proc.returncode not in PLANNED:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    data = json.loads(proc.stdout)
    logged = point.get("logged") or {}
    out: dict[str, Any] = {}
    planned_kv = data.get("kv_cache_bytes") or 0
    tokens = data.get("kv_tokens") or 0
    kv_logged = _number(logged.get("available_kv_gib"))
    if kv_logged is None and logged.get("k_size_gb") is not None and logged.get("v_size_gb") is not None:
        k, v = _number(logged["k_size_gb"]), _number(logged["v_size_gb"])
        kv_logged = (k or 0) + (v or 0)
    logged_tokens = _number(logged.get("kv_tokens"))
    if logged_tokens is None and _number(logged.get("gpu_blocks")) is not None and point.get("engine") != "sglang":
        # V0's "# GPU blocks: N": N blocks of the engine's block size (16, vLLM's CUDA default, unless the index
        # states another), i.e. the pool in tokens
        logged_tokens = _number(logged["gpu_blocks"]) * int(point.get("block_size") or 16)  # type: ignore[operator]
    if kv_logged is not None:
        out["kv_cache"] = (kv_logged, planned_kv / GiB)
    elif logged_tokens is not None and tokens and "hybrid" not in data:
        # tokens at the plan's bytes per token; not for hybrids, whose token count depends on how the attention and
        # state groups share blocks and on the log's KV dtype, which the index does not give
        out["kv_cache"] = (logged_tokens * planned_kv / tokens / GiB, planned_kv / GiB)
        out["kv_from_tokens"] = True
    weights_logged = _number(logged.get("weights_gib"))
    if weights_logged is None:
        weights_logged = _number(logged.get("weights_loading_took"))
    planned_weights = ((data.get("terms") or {}).get("weights") or {}).get("bytes")
    if weights_logged is not None and planned_weights:
        out["weights"] = (weights_logged, planned_weights / GiB)
    if not out:
        out["unscored"] = "planned; nothing logged that this mode can score"
    return out


def _hybrid(model: str | None) -> bool:
    """A hybrid (attention + recurrent state): its logged token count depends on how the attention and state groups
    share blocks, which changed between vLLM versions, so it is not converted to bytes at the plan's ratio."""
    if not model:
        return False
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vramctl.core.errors import VramctlError
    from vramctl.registry import load_model

    try:
        return load_model(model).state_space is not None
    except VramctlError:
        return False


def _number(value: Any) -> float | None:
    parsed = _first_number(value) if value is not None else None
    return None if parsed is None else parsed[0]


def compare(
    log: Path, plan: dict[str, Any], model: str | None = None, point: dict[str, Any] | None = None
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "vramctl", "read-log", str(log), "--compare-plan", "--json"]
    flags = stated_flags(point or {})
    if flags and (point or {}).get("engine") != "sglang":
        # settings the thread states that an excerpt without the args line does not: the log wins where it has them
        cmd += ["--command", shlex.join(["vllm", "serve", str(model or plan.get("model") or "model"), *flags])]
    if model or plan.get("model"):
        cmd += ["--model", str(model or plan["model"])]
    if plan.get("gpu_memory") is not None:
        cmd += ["--gpu-memory", str(plan["gpu_memory"])]
    elif plan.get("gpu"):
        cmd += ["--gpu", str(plan["gpu"])]
    # without the index's version a log whose excerpt names none would be compared with the newest vLLM's rules
    version = _stated_version(plan, point or {})
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # read-log refuses a version other than one the log states itself: then the log's own is used
    attempts = [[*cmd, "--engine-version", version], cmd] if version else [cmd]
    for attempt in attempts:
        proc = subprocess.run(attempt, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
        if proc.returncode == 0:
            break
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
    if (
        "kv_cache" not in out
        and kv_row.get("planned")
        and tok_row.get("logged")
        and tok_row.get("planned")
        and not _hybrid(model or plan.get("model"))
    ):
        # The log gives the pool in tokens only (V1 "GPU KV cache size: N tokens"): in bytes at the plan's own
        # bytes per token, which is exact for the layout the plan and the engine share.
        per_token = kv_row["planned"] / tok_row["planned"]
        out["kv_cache"] = (tok_row["logged"] * per_token / GiB, kv_row["planned"] / GiB)
        out["kv_from_tokens"] = True
    if "kv_cache" not in out and rows.get("kv_cache", {}).get("planned") is None:
        out["error"] = "no planned KV (" + "; ".join(comp.get("notes", [])[:1]) + ")"
    return out


def _print_errors(errors: list[tuple[float, str]], ids: set[str], what: str, unit: str, *, name_worst: bool) -> None:
    """One line: the median and the worst of the errors of the points in `ids` (the worst named for dev points only:
    held-out points are reported in aggregate)."""
    mine = [(e, pid) for e, pid in errors if pid in ids]
    if not mine:
        return
    worst = max(mine)
    median = statistics.median([e for e, _ in mine])
    where = f" ({worst[1]})" if name_worst else ""
    print(f"   {what.format(n=len(mine))}: median {unit.format(median)}, worst {unit.format(worst[0])}{where}")


def _summary(
    split: str,
    ids: set[str],
    kv_err: list[tuple[float, str]],
    w_err: list[tuple[float, str]],
    unplanned: list[str],
    sources: dict[str, str],
    unscored: set[str],
) -> dict[str, Any]:
    """One split's numbers: KV and weights |error| on the planned points (those planned from a derived base on a
    line of their own), and what could not be planned (held out: counted by reason, not listed per point)."""
    failed = {u.split(":", 1)[0] for u in unplanned}
    planned = [pid for pid in ids if pid in sources and pid not in failed]
    by_source = {src: sum(1 for pid in planned if sources[pid] == src) for src in SOURCES}
    dev = split != "heldout"
    print(
        f"-- {split}: {len(ids)} start-ups, {len(ids) - len(unplanned)} planned "
        f"({by_source[REGISTRY]} from the registry, {by_source[CONFIG_FOLDER]} from a config.json folder, "
        f"{by_source[DERIVED]} from a derived base; {sum(1 for pid in planned if pid in unscored)} with nothing "
        f"this mode can score), {len(unplanned)} not planned"
    )
    comparable = {pid for pid in planned if sources[pid] != DERIVED}
    derived = {pid for pid in planned if sources[pid] == DERIVED}
    _print_errors(kv_err, comparable, "KV cache |error| on {n} planned with a logged KV", "{:.2f} GiB", name_worst=dev)
    _print_errors(w_err, comparable, "weights |error| on {n}", "{:.1f} %", name_worst=dev)
    if derived:
        _print_errors(
            kv_err, derived, "planned from a derived base: KV cache |error| on {n}", "{:.2f} GiB", name_worst=dev
        )
        _print_errors(w_err, derived, "planned from a derived base: weights |error| on {n}", "{:.1f} %", name_worst=dev)
    if dev:
        for line in unplanned:
            print("     " + line)
    else:
        reasons: dict[str, int] = {}
        for line in unplanned:
            reason = "could not be planned (vramctl's error)" if ": could not be planned" in line else "no plan mapping"
            reasons[reason] = reasons.get(reason, 0) + 1
        for reason, count in sorted(reasons.items()):
            print(f"     {count} × {reason}")

    def agg(errors: list[tuple[float, str]], chosen: set[str]) -> dict[str, Any] | None:
        mine = [e for e, pid in errors if pid in chosen]
        return {"n": len(mine), "median": statistics.median(mine), "worst": max(mine)} if mine else None

    return {
        "start_ups": len(ids),
        "planned": {src: by_source[src] for src in SOURCES},
        "not_planned": len(unplanned),
        "kv_abs_error_gib": agg(kv_err, comparable),
        "weights_abs_error_pct": agg(w_err, comparable),
        "derived_kv_abs_error_gib": agg(kv_err, derived),
        "derived_weights_abs_error_pct": agg(w_err, derived),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--logs", type=Path, default=None, help="the logs the index names; without it: plan from the index, no read-log"
    )
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
    unscored: set[str] = set()
    no_log: list[str] = []
    split_of = {p["id"]: p.get("split", "heldout") for p in index["datapoints"]}
    result: dict[str, Any] = {"points": {}, "mode": "read-log --compare-plan" if args.logs else "plan from the index"}
    for point in index["datapoints"]:
        pid = point["id"]
        entry: dict[str, Any] = {}
        log = args.logs / point["log_file"] if args.logs is not None else None
        if log is not None and not log.is_file():
            # a log that could not be had: planned from the index's fields, as without --logs, and counted
            no_log.append(pid)
            log = None
        if log is not None:
            f, t, missed = recovery(log, point.get("logged") or {})
            found += f
            total += t
            entry.update(recovered=[f, t], missed=missed)
        plan = point.get("plan") or {}
        source, model = plan_source(point, args.configs)
        if source is None:
            unplanned.append(f"{pid}: {model}")
        else:
            sources[pid] = source
            entry["source"] = source
            res = compare(log, plan, model, point) if log is not None else plan_only(point, plan, model)
            entry["compare"] = dict(res.items())
            if "kv_cache" in res:
                logged, planned = res["kv_cache"]
                kv_err.append((abs(planned - logged), pid))
            if "weights" in res:
                logged, planned = res["weights"]
                w_err.append((abs(planned - logged) / abs(logged) * 100, pid))
            if "unscored" in res:
                unscored.add(pid)
            if "error" in res and "kv_cache" not in res and "weights" not in res:
                unplanned.append(f"{pid}: could not be planned: {res['error']}")
        if split_of[pid] == "heldout":
            continue  # held-out points: aggregate numbers only
        result["points"][pid] = entry
        line = f"{pid}: "
        if "recovered" in entry:
            line += f"read-log {entry['recovered'][0]}/{entry['recovered'][1]}"
            line += f" missed {entry['missed']}" if entry["missed"] else ""
        if "compare" in entry:
            c = entry["compare"]
            parts = [
                f"{k}{' (from tokens)' if k == 'kv_cache' and c.get('kv_from_tokens') else ''} "
                f"logged {v[0]:.2f} planned {v[1]:.2f}"
                for k, v in c.items()
                if isinstance(v, tuple)
            ]
            note = c.get("error") or c.get("unscored")
            line += f"[{entry['source']}] " + "; ".join(parts) + (f" | {note}" if note else "")
        print(line)
    print()
    if args.logs is not None:
        print(f"read-log recovered {found} of {total} logged numbers ({100 * found / max(1, total):.1f} %)")
        result["recovered"] = [found, total]
        if no_log:
            print(f"{len(no_log)} points without their log in {args.logs}: planned from the index's fields instead")
            result["no_log"] = len(no_log)
    else:
        print("no --logs: read-log recovery skipped; planned from the index's fields (see the docstring)")
    result["splits"] = {}
    for split in ("heldout", "dev"):
        ids = {pid for pid, sp in split_of.items() if sp == split}
        if ids:
            result["splits"][split] = _summary(
                split, ids, kv_err, w_err, [u for u in unplanned if u.split(":", 1)[0] in ids], sources, unscored
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=list) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
