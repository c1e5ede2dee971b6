"""The advice on a failed requirement: which single change (utilisation, KV dtype, tensor parallelism, a longer
context) reaches it, with the numbers."""

from __future__ import annotations

import math

from vramctl.core.check.results import CheckItem, EngineOutcome
from vramctl.core.check.spec import ConcurrencyRequirement
from vramctl.core.settings import ServeSettings
from vramctl.core.units import format_bytes, format_count
from vramctl.core.utilization import utilization_for_kv


def _utilization_for(o: EngineOutcome, kv_needed: int) -> float:
    """The utilisation / fraction that gives `kv_needed` bytes of KV, all else equal."""
    if o.engine == "vllm":
        return utilization_for_kv(o.capacity_bytes, o.non_kv_bytes, kv_needed)
    # SGLang: KV ≈ mfs × pre − weights.
    return math.ceil((kv_needed + o.weights_bytes) / o.free_before_load_bytes * 1000) / 1000


def _kv_available(o: EngineOutcome, util: float, factor: int) -> float:
    """KV bytes per rank at utilisation `util` with `factor` × the current TP (weights shrink by the factor)."""
    if o.engine == "vllm":
        return util * o.capacity_bytes - (o.non_kv_bytes - o.weights_bytes + o.weights_bytes / factor)
    return util * o.free_before_load_bytes - o.weights_bytes / factor


def _kv_needed_per_rank(o: EngineOutcome, kv_needed: int, factor: int) -> float:
    """MHA KV heads split over TP until each rank holds one; an MLA latent is on every rank."""
    if o.is_mla:
        return float(kv_needed)
    split = min(factor, max(1, o.kv_heads_per_rank))
    return kv_needed / split


def more_kv_advice(o: EngineOutcome, kv_needed: int, settings: ServeSettings) -> str:
    """Which single change reaches `kv_needed` bytes of KV per rank, with the numbers."""
    short = kv_needed - o.kv_cache_bytes
    limit = 0.98 if o.engine == "vllm" else 0.95
    options: list[str] = []
    u = _utilization_for(o, kv_needed)
    if u <= limit:
        options.append(f"raise {o.utilization_flag} to {u:.3f} (from {o.utilization:.3f})")
    if settings.kv_cache_dtype in ("auto", "", "bfloat16", "float16", "bf16", "fp16"):
        u_fp8 = _utilization_for(o, kv_needed // 2)
        if u_fp8 <= max(limit, o.utilization):
            then = "" if u_fp8 <= o.utilization else f" with {o.utilization_flag} {u_fp8:.3f}"
            options.append(f"--kv-cache-dtype fp8 (half the bytes per token){then}")
    tp_flag = "--tensor-parallel-size" if o.engine == "vllm" else "--tp-size"
    for factor in (2, 4, 8):
        if _kv_available(o, o.utilization, factor) >= _kv_needed_per_rank(o, kv_needed, factor):
            split = 1 if o.is_mla else min(factor, max(1, o.kv_heads_per_rank))
            options.append(
                f"{tp_flag} {o.tensor_parallel_size * factor} (per rank: weights ÷{factor}, KV per token ÷{split})"
            )
            break
    head = f"needs {format_bytes(kv_needed)} of KV per rank at tp {o.tensor_parallel_size} ({format_bytes(short)} more)"
    if not options:
        can = max(1.0, _kv_available(o, o.utilization, 1))
        wider = next(
            (
                factor
                for factor in (16, 32, 64)
                if _kv_available(o, o.utilization, factor) >= _kv_needed_per_rank(o, kv_needed, factor)
            ),
            None,
        )
        more = (
            f"use more GPUs ({tp_flag} ≥ {o.tensor_parallel_size * wider})"
            if wider is not None
            else f"no tensor-parallel size up to {tp_flag} {o.tensor_parallel_size * 64} reaches it either"
        )
        return (
            f"{head}: no single change reaches it on this card (about {kv_needed / can:.1f}× what it holds); "
            f"lower the requirement or {more}"
        )
    return f"{head}: " + ", or ".join(options)


def context_too_long(o: EngineOutcome, c: ConcurrencyRequirement) -> CheckItem:
    """A requirement at a context longer than the server's max_model_len / context_length: the engine refuses
    every such request (vLLM: "longer than the maximum model length"), so none run at once, whatever the KV."""
    len_flag = "--max-model-len" if o.engine == "vllm" else "--context-length"
    if o.model_max_len and c.context > o.model_max_len:
        advice = (
            f"the model itself stops at {format_count(o.model_max_len)} tokens (max_position_embeddings): "
            "lower the requirement's context or pick a longer-context model"
        )
    else:
        advice = f"raise {len_flag} to {c.context} (then check the KV again)"
    message = (
        f"the server refuses requests longer than {len_flag} {o.context_len}: no sequence of "
        f"{format_count(c.context)} tokens runs; {advice}"
    )
    return CheckItem(f"min_concurrency@{c.context}", o.engine, False, "0.00", f"≥ {c.value:g}", message)


def at_risk_item(o: EngineOutcome) -> CheckItem:
    """A plan that starts only if every estimate holds: the numbers at the pessimistic edge and the fixes."""
    edge = o.pessimistic
    where = (
        f"{edge.verdict}: {max(0, edge.kv_cache_bytes) / (1 << 30):.2f} GiB of KV, {edge.max_concurrency:.2f}x of "
        f"one {o.context_len}-token request"
        if edge is not None
        else "it does not start"
    )
    fixes = ", or ".join(f.argument for f in o.fixes[:3])
    message = (
        f"fits only if the estimates hold: with every estimated term at the top of its ± band, {where}"
        + (f"; fix: {fixes}" if fixes else "")
        + "; or accept the risk with requirements.allow_at_risk: true"
    )
    return CheckItem(
        "at_risk",
        o.engine,
        False,
        "at risk" if edge is None else f"{edge.max_concurrency:.2f}x (pessimistic)",
        "fits (pessimistic)",
        message,
    )


