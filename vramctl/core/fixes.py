"""The smallest fixes of a plan that does not fit, or fits only if the estimates hold.

For vLLM and SGLang alike, each candidate is ONE change of the serve command, and each is checked by planning
it again (the same rules, the same estimates): a fix counts only when the changed plan fits at the pessimistic
edge of the estimates too (`PlanResult.at_risk` false), so a fix is not itself a gamble.

    shorter context      --max-model-len N        (SGLang --context-length)     the largest N that fits
    utilisation          --gpu-memory-utilization (SGLang --mem-fraction-static) the smallest step up that fits
                                                   (down, when the request exceeds the free memory)
    tensor parallelism   --tensor-parallel-size N (SGLang --tp-size)            the smallest N ≤ 8 that fits
    fp8 KV cache         --kv-cache-dtype fp8     (SGLang fp8_e5m2)             half the bytes per token
    quantised weights    --quantization fp8                                     or a pre-quantised checkpoint
    fewer sequences      --max-num-seqs N         (SGLang --max-running-requests) the largest N that fits

Pure: the planner is passed in (vramctl.core.plan.plan calls `find_fixes` with itself, minus the fixes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vramctl.core.errors import VramctlError
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GiB
from vramctl.core.utilization import margin_risk
from vramctl.core.verdicts import Verdict

MAX_TP = 8
"""The largest tensor-parallel size suggested: one node of eight GPUs."""
MAX_UTILIZATION = 0.98
"""Above this the card keeps under 2 % for graphs, fragmentation and logprob spikes (docs/concepts.md)."""
MAX_FRACTION = 0.95

Planner = Callable[[ServeSettings], Any]
"""ServeSettings → PlanResult (without fixes)."""


@dataclass(frozen=True)
class Fix:
    """One change of the serve command, with what the plan becomes with it."""

    flag: str
    """As the engine spells it (`--max-model-len`, `--mem-fraction-static`, …)."""
    value: int | float | str
    description: str
    kv_tokens: int
    max_concurrency: float
    pessimistic_kv_tokens: int
    """The KV tokens at the pessimistic edge of the estimates (equal to kv_tokens where there is no band)."""

    @property
    def argument(self) -> str:
        """The pasteable flag and value: `--max-model-len 23760`."""
        return f"{self.flag} {self.value}"

    def to_json(self) -> dict[str, Any]:
        return {
            "flag": self.flag,
            "value": self.value,
            "argument": self.argument,
            "description": self.description,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "pessimistic_kv_tokens": self.pessimistic_kv_tokens,
        }


def _safe(planner: Planner, settings: ServeSettings) -> Any:
    try:
        return planner(settings)
    except VramctlError:  # a TP size the heads do not divide, an fp8 the card cannot run, …
        return None


def _ok(result: Any) -> bool:
    return result is not None and bool(result.fits) and not bool(result.at_risk)


def _fix(flag: str, value: int | float | str, description: str, result: Any) -> Fix:
    edge = result.pessimistic
    return Fix(
        flag=flag,
        value=value,
        description=description,
        kv_tokens=int(result.kv_tokens),
        max_concurrency=float(result.max_concurrency),
        pessimistic_kv_tokens=int(edge.kv_tokens) if edge is not None else int(result.kv_tokens),
    )


def _largest(
    planner: Planner, settings: ServeSettings, field: str, below: int, guess: int | None = None
) -> tuple[int, Any] | None:
    """The largest value of the int `field` in [1, below) whose plan is fixed (the plans are monotone in it).
    `guess`: a likely answer (the longest length that fits at the pessimistic edge), checked first with its
    successor: two plans instead of a binary search when it is right."""
    if below <= 1:
        return None
    if guess is not None and 1 <= guess < below:
        at = _safe(planner, settings.with_changes(**{field: guess}))
        if _ok(at) and (
            guess + 1 >= below or not _ok(_safe(planner, settings.with_changes(**{field: guess + 1})))
        ):
            return guess, at
    low = _safe(planner, settings.with_changes(**{field: 1}))
    if not _ok(low):
        return None
    lo, hi, best = 1, below - 1, low
    while lo < hi:
        mid = (lo + hi + 1) // 2
        r = _safe(planner, settings.with_changes(**{field: mid}))
        if _ok(r):
            lo, best = mid, r
        else:
            hi = mid - 1
    if lo != 1:
        best = _safe(planner, settings.with_changes(**{field: lo}))
    return lo, best


def find_fixes(result: Any, settings: ServeSettings, planner: Planner) -> tuple[Fix, ...]:
    """The single changes that make `result` (planned from `settings`) fit at the pessimistic edge, smallest
    first within each kind; empty for a plan that already does, or fails for a reason none of them touches."""
    if result.fits and not result.at_risk:
        return ()
    if result.verdict == Verdict.HOST_PINNED_MEMORY_FAILURE:
        return ()
    sglang = result.engine == "sglang"
    fixes: list[Fix] = []

    # A shorter context (the length vLLM would auto-fit, at the pessimistic edge).
    current_len = int(result.max_model_len)
    if settings.max_model_len != -1 and current_len > 1:
        edge = result.pessimistic
        guess = int(edge.max_model_len_fit) if edge is not None else int(result.max_model_len_fit)
        found = _largest(planner, settings, "max_model_len", current_len, guess)
        if found is not None:
            length, r = found
            flag = "--context-length" if sglang else "--max-model-len"
            fixes.append(_fix(flag, length, f"the longest context that fits (from {current_len})", r))

    # The utilisation / static fraction, one step of 0.01 at a time.
    if sglang and result.sglang is not None:
        current_u = round(float(result.sglang.mem_fraction_static), 3)
        field, flag, limit = "mem_fraction_static", "--mem-fraction-static", MAX_FRACTION
    else:
        current_u = float(result.settings.gpu_memory_utilization)
        field, flag, limit = "gpu_memory_utilization", "--gpu-memory-utilization", MAX_UTILIZATION
    if settings.kv_cache_memory_bytes is None or sglang:
        down = result.verdict == Verdict.GPU_UTIL_EXCEEDS_FREE
        step = -1 if down else 1
        hundredths = round(current_u * 100) + step
        while 1 <= hundredths <= round(limit * 100):
            u = hundredths / 100
            r = _safe(planner, settings.with_changes(**{field: u}))
            if _ok(r):
                held = int(r.capacity_bytes) - int(r.requested_bytes)
                thin = not sglang and margin_risk(held, int(r.capacity_bytes))[0] == "thin"
                fixes.append(
                    _fix(
                        flag,
                        u,
                        f"{'down' if down else 'up'} from {current_u:g}"
                        + (
                            f" (thin margin: {held / GiB:.2f} GiB held back; a dedicated card only)"
                            if thin
                            else ""
                        ),
                        r,
                    )
                )
                break
            hundredths += step

    # Tensor parallelism.
    tp = settings.tensor_parallel_size
    factor = 2
    while tp * factor <= MAX_TP:
        r = _safe(planner, settings.with_changes(tensor_parallel_size=tp * factor))
        if _ok(r):
            fixes.append(
                _fix(
                    "--tp-size" if sglang else "--tensor-parallel-size",
                    tp * factor,
                    f"{tp * factor} GPUs instead of {tp}: weights and KV heads split over them",
                    r,
                )
            )
            break
        factor *= 2

    # An fp8 KV cache.
    if settings.kv_cache_dtype in ("auto", "bfloat16", "float16", "bf16", "fp16"):
        fp8 = "fp8_e5m2" if sglang else "fp8"
        r = _safe(planner, settings.with_changes(kv_cache_dtype=fp8))
        if _ok(r):
            fixes.append(_fix("--kv-cache-dtype", fp8, "half the KV bytes per token", r))

    # Quantised weights.
    if result.model.quantization is None and settings.quantization is None:
        r = _safe(planner, settings.with_changes(quantization="fp8"))
        if _ok(r):
            fixes.append(
                _fix(
                    "--quantization",
                    "fp8",
                    "weights in FP8 (quantised while loading; or serve a pre-quantised FP8 checkpoint)",
                    r,
                )
            )

    # Fewer sequences (vLLM's sampler warm-up grows with --max-num-seqs).
    if not sglang:
        seqs = int(result.settings.max_num_seqs)
        found = _largest(planner, settings, "max_num_seqs", seqs)
        if found is not None:
            n, r = found
            fixes.append(_fix("--max-num-seqs", n, f"at most {n} sequences at once (from {seqs})", r))
    return tuple(fixes)


__all__ = ["Fix", "find_fixes"]
