"""A fix value checked with `plan`: the deployment reconstructed from the log, then the value that makes it start.

When a start-up memory failure's own message does not give the number to set (the engine printed no estimate,
no free memory, no KV terms), the log usually still says what was deployed: the model, the device total, the
engine version and the flags (what `read-log` reads: `parse_startup_log` + `settings_from_report`). This module
plans that deployment with `vramctl.core.plan.plan` and searches the one setting the label is about:

| label | setting searched | how |
| --- | --- | --- |
| `kv-cache-too-small-for-max-model-len` | `--max-model-len` (SGLang `--context-length`) | the plan's largest length that fits the KV cache |
| `no-kv-cache-memory` | `--gpu-memory-utilization` (SGLang `--mem-fraction-static`) | the smallest value above the log's, up to 0.98, whose plan fits |
| `weights-do-not-fit` | `--tensor-parallel-size` (SGLang `--tp-size`) | the smallest of 2, 4, 8 (above the log's) whose plan fits |

Offline only: the model must be in the bundled registry or the local Hugging Face cache (`load_model` never
downloads). The fix says "checked with plan" and what was planned. Any failure to reconstruct (model not named or
not known, no device total, a log read from standard input, a log over `MAX_PLAN_LOG_BYTES`) gives no fix, never
an error: the other fixes stand.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_PLAN_LOG_BYTES",
    "PLAN_LABELS",
    "PlanFix",
    "deployment",
    "deployment_of_log",
    "fits",
    "plan_checked_fix",
]

PLAN_LABELS = frozenset({"kv-cache-too-small-for-max-model-len", "no-kv-cache-memory", "weights-do-not-fit"})
MAX_PLAN_LOG_BYTES = 64 << 20
"""A second read of the log for its start-up lines is only done for logs up to this size (start-up failures end
their logs early; a 1 GiB serving log is not re-read)."""


@dataclass(frozen=True, slots=True)
class PlanFix:
    action: str
    flag: str
    value: str
    reason: str


def _deployment(path: str, total_bytes: int | None) -> tuple[Any, Any, Any, str] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return _deployment_of(path, stat.st_size, stat.st_mtime_ns, total_bytes)


@functools.lru_cache(maxsize=8)
def _deployment_of(
    path: str, size: int, mtime_ns: int, total_bytes: int | None
) -> tuple[Any, Any, Any, str] | None:
    """The reconstruction, once per log version (the planned facts and the plan-checked fix both ask for it)."""
    from vramctl.core.errors import VramctlError
    from vramctl.diagnose.startup import settings_from_report
    from vramctl.registry import gpu_from_capacity, load_model

    report = _report_of(path, size, mtime_ns)
    logged = report.settings.get("model")
    if logged is None:
        return None
    name = str(logged.value)
    model = None
    for candidate in (name, name.rstrip("/").rsplit("/", 1)[-1]):
        try:
            model = load_model(candidate, offline=True)  # never the network: the registry and the local cache
            break
        except (VramctlError, OSError, ValueError):
            continue
    if model is None:
        return None
    capacity = report.capacity_bytes or total_bytes or _named_gpu_total(path, size, mtime_ns)
    if not capacity:
        return None
    settings = settings_from_report(report).with_changes(gpu_memory_bytes=capacity)
    return model, gpu_from_capacity(capacity), settings, name


@functools.lru_cache(maxsize=8)
def _report_of(path: str, size: int, mtime_ns: int) -> Any:
    """The log's start-up report (`read-log`'s reading), once per log version."""
    from vramctl.diagnose.reader import iter_matching_lines
    from vramctl.diagnose.startup import parse_startup_log, startup_prefilter

    return parse_startup_log(iter_matching_lines(path, startup_prefilter(), context_after=1))


def named_size_of_log(source: object, facts: Mapping[str, Any], bytes_read: int) -> dict[str, Any]:
    """Where `deployment_of_log` finds no plan because the model is not known offline: the weights-only facts of
    the size its name states (vramctl/diagnose/namedsize.py); {} otherwise, never an error."""
    from vramctl.diagnose.namedsize import named_facts
    from vramctl.diagnose.startup import settings_from_report

    path = _plannable_path(source, bytes_read)
    if path is None:
        return {}
    try:
        stat = os.stat(path)
        report = _report_of(path, stat.st_size, stat.st_mtime_ns)
        logged = report.settings.get("model")
        if logged is None:
            return {}
        capacity = report.capacity_bytes or _logged_total(facts)
        capacity = capacity or _named_gpu_total(path, stat.st_size, stat.st_mtime_ns)
        if not capacity:
            return {}
        return dict(named_facts(report, settings_from_report(report), str(logged.value), int(capacity), facts))
    except Exception:
        return {}


_GPU_NAME_RE = re.compile(
    r"(?<![\w.-])(?:NVIDIA[ -])?(?:Tesla[ -]|GeForce[ -])?"
    r"(?P<gpu>(?:RTX[ -]?\d{4}(?:[ -]?Ti)?|[AHLBTV]\d{1,3}[A-Z]?)(?:[ -](?:PCIE|PCIe|SXM\d?|NVL))?(?:[ -]?\d{2,3} ?G(?:B|iB)?)?)"
    r"(?![\w])"
)
_NAMED_GPU_BYTES = 256 << 10
"""Only the head of a report is read for the card it names (the title and the environment it states)."""


@functools.lru_cache(maxsize=8)
def _named_gpu_total(path: str, size: int, mtime_ns: int) -> int | None:
    """The CUDA total of the one card a report names in words (`4x NVIDIA L40S GPUs`, `A100-PCIE-40GB`, `4 A100 40G`)
    when no engine line printed the device's total: the bundled board's profile, None when no board or more than one
    board is named (never a guess between two cards). Read once per log version (the planned deployment and the size
    a name states both ask for it)."""
    from vramctl.core.errors import VramctlError
    from vramctl.diagnose.pasted import Unpaster
    from vramctl.registry import load_gpu

    try:
        with open(path, "rb") as handle:
            raw = handle.read(_NAMED_GPU_BYTES)
    except OSError:
        return None
    # read as the scan reads it: a pasted log's line numbers (`L4 `) are no card's name
    head = Unpaster().block(1, raw, None)[0].decode("utf-8", "replace")
    totals: set[int] = set()
    for match in _GPU_NAME_RE.finditer(head):
        try:
            totals.add(int(load_gpu(match.group("gpu")).cuda_total_bytes))
        except (VramctlError, ValueError):
            continue
    return totals.pop() if len(totals) == 1 else None


def _fits(model: Any, gpu: Any, settings: Any) -> Any | None:
    from vramctl.core.plan import plan

    try:
        result = plan(model, gpu, settings)
    except Exception:  # a setting the planner refuses (e.g. a TP that does not divide the heads) is no answer
        return None
    return result


deployment = _deployment
"""(model, gpu, settings, model name) of the deployment a log describes, or None (also used by explicitkv.py)."""


def _plannable_path(source: object, bytes_read: int) -> str | None:
    """The log's path when its deployment may be reconstructed: a file (not stdin, not a stream) of at most
    `MAX_PLAN_LOG_BYTES`; None otherwise."""
    if not isinstance(source, (str, os.PathLike)) or str(source) == "-":
        return None
    if bytes_read > MAX_PLAN_LOG_BYTES or not os.path.isfile(source):
        return None
    return str(source)


def _logged_total(facts: Mapping[str, Any]) -> int | None:
    """The incident's `total_bytes` (the device total an OOM message printed), when it is one."""
    total = facts.get("total_bytes")
    return total if isinstance(total, int) and total > 0 else None


def deployment_of_log(source: object, facts: Mapping[str, Any], bytes_read: int) -> tuple[Any, Any, Any, str] | None:
    """`deployment` for a diagnosed log (`_plannable_path`), with the incident's `total_bytes` as the device total
    where the log's start-up lines give none; None on any failure (the reconstruction is an extra: a log it cannot
    read gives no plan-checked answer, never an error)."""
    path = _plannable_path(source, bytes_read)
    if path is None:
        return None
    try:
        return _deployment(path, _logged_total(facts))
    except Exception:
        return None


fits = _fits
"""The plan of a deployment, or None when the planner refuses its settings."""


def plan_checked_fix(
    source: object, cause: str, engine: str | None, facts: dict[str, Any], bytes_read: int
) -> PlanFix | None:
    """The plan-checked value for `cause`, or None when the deployment cannot be reconstructed or no value fits."""
    if cause not in PLAN_LABELS:
        return None
    found = deployment_of_log(source, facts, bytes_read)
    if found is None:
        if cause != "weights-do-not-fit" or "named_weights_per_rank_bytes" not in facts:
            return None
        from vramctl.diagnose.namedsize import named_tp_fix

        named = named_tp_fix(facts, engine)  # a model not known offline: sized from its name (namedsize.py)
        return None if named is None else PlanFix(*named)
    model, gpu, settings, name = found
    sglang = engine == "sglang" or getattr(settings, "engine", "vllm") == "sglang"
    where = f"checked with plan: {name} on a {gpu.cuda_total_bytes / 2**30:.2f} GiB GPU"
    if cause == "kv-cache-too-small-for-max-model-len":
        result = _fits(model, gpu, settings)
        fit = int(getattr(result, "max_model_len_fit", 0) or 0) if result is not None else 0
        asked = getattr(settings, "max_model_len", None) or (
            getattr(result, "max_model_len", 0) if result else 0
        )
        if fit <= 0 or (asked and fit >= asked):
            return None
        flag = "--context-length" if sglang else "--max-model-len"
        return PlanFix(
            "cap the context length at what the KV cache holds",
            flag,
            str(fit),
            f"{where}, the KV cache holds {fit} tokens for one sequence (asked: {asked})",
        )
    if cause == "no-kv-cache-memory":
        key = "mem_fraction_static" if sglang else "gpu_memory_utilization"
        current = getattr(settings, key, None)
        if current is None and not sglang:
            # unset: the planned release's own default (0.9 / 0.92 / 1.0), as plan resolves it
            base = _fits(model, gpu, settings)
            current = getattr(getattr(base, "settings", None), key, None)
        current = current or (0.88 if sglang else 0.9)
        step = round(float(current) + 0.01, 2)
        while step <= 0.98:
            result = _fits(model, gpu, settings.with_changes(**{key: step}))
            if result is not None and result.fits:
                flag = "--mem-fraction-static" if sglang else "--gpu-memory-utilization"
                return PlanFix(
                    "RAISE the budget to the smallest value whose plan leaves a KV cache",
                    flag,
                    f"{step:.2f}",
                    f"{where}: {current} leaves no KV cache, {step:.2f} does ({result.kv_tokens} KV tokens)",
                )
            step = round(step + 0.01, 2)
        return None
    # weights-do-not-fit
    tp_now = int(getattr(settings, "tensor_parallel_size", 1) or 1)
    for tp in (2, 4, 8):
        if tp <= tp_now:
            continue
        result = _fits(model, gpu, settings.with_changes(tensor_parallel_size=tp))
        if result is not None and result.fits:
            return PlanFix(
                "spread the weights over more GPUs",
                "--tp-size" if sglang else "--tensor-parallel-size",
                str(tp),
                f"{where}: the weights do not fit at {tp_now} GPU(s), they do at {tp} ({result.kv_tokens} KV tokens left)",
            )
    return None
