"""Evaluate a deployment spec: plan it with each engine (`run_check`) and check every requirement against each
engine's outcome (`evaluate`); exit code 0 when all hold, 1 otherwise."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from vramctl.core.check.advice import at_risk_item, context_too_long, more_kv_advice
from vramctl.core.check.results import CheckItem, CheckResult, EngineOutcome, sglang_outcome, vllm_outcome
from vramctl.core.check.spec import ConcurrencyRequirement, DeploySpec, Requirements
from vramctl.core.engines.sglang import plan_sglang
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import format_bytes, format_count


def _must_fit(o: EngineOutcome, must_fit: bool) -> CheckItem:
    ok = o.verdict == "fits" or not must_fit
    return CheckItem(
        "must_fit", o.engine, ok, o.verdict, "fits" if must_fit else "any", "" if ok else o.verdict_message or o.verdict
    )


def _concurrency(o: EngineOutcome, c: ConcurrencyRequirement, fits: bool, settings: ServeSettings) -> CheckItem:
    if c.context > o.context_len:
        return context_too_long(o, c)
    actual = o.concurrency_at(c.context) if fits else 0.0
    ok = actual >= c.value
    message = ""
    if not ok and fits and o.kv_concurrency_at(c.context) >= c.value:
        message = (
            f"the KV pool holds {o.kv_concurrency_at(c.context):.2f} sequences of "
            f"{format_count(c.context)} tokens but the scheduler runs at most {o.max_sequences}: "
            f"raise {o.max_sequences_flag} to {math.ceil(c.value)}"
        )
    elif not ok:
        if o.engine == "vllm":
            kv_needed = math.ceil(math.ceil(c.value) * o.blocks_for(c.context)) * o.bytes_per_block
        else:
            kv_needed = math.ceil(c.value * c.context) * o.bytes_per_token
        message = f"{actual:.2f} sequences of {format_count(c.context)} tokens < {c.value:g}; " + more_kv_advice(
            o, kv_needed, settings
        )
    return CheckItem(f"min_concurrency@{c.context}", o.engine, ok, f"{actual:.2f}", f"≥ {c.value:g}", message)


def _kv_tokens(o: EngineOutcome, minimum: int, fits: bool, settings: ServeSettings) -> CheckItem:
    ok = fits and o.kv_tokens >= minimum
    message = ""
    if not ok:
        message = f"{format_count(o.kv_tokens)} KV tokens < {format_count(minimum)}; " + more_kv_advice(
            o, minimum * o.bytes_per_token, settings
        )
    return CheckItem("min_kv_tokens", o.engine, ok, str(o.kv_tokens), f"≥ {minimum}", message)


def _headroom(o: EngineOutcome, minimum: int) -> CheckItem:
    ok = o.headroom_bytes >= minimum
    message = ""
    if not ok:
        short = minimum - o.headroom_bytes
        base = o.capacity_bytes if o.engine == "vllm" else o.free_before_load_bytes
        target = math.floor((o.utilization - short / base) * 1000) / 1000
        message = (
            f"{format_bytes(o.headroom_bytes)} left on the card < {format_bytes(minimum)}; "
            f"lower {o.utilization_flag} to {target:.3f} (from {o.utilization:.3f}; "
            f"costs {format_bytes(short)} of KV)"
        )
    return CheckItem(
        "min_headroom", o.engine, ok, format_bytes(o.headroom_bytes), f"≥ {format_bytes(minimum)}", message
    )


def _utilization(o: EngineOutcome, maximum: float) -> CheckItem:
    ok = o.utilization <= maximum + 1e-12
    message = ""
    if not ok:
        base = o.capacity_bytes if o.engine == "vllm" else o.free_before_load_bytes
        cost = int((o.utilization - maximum) * base)
        message = (
            f"{o.utilization_flag} {o.utilization:.3f} > {maximum:g}; set {o.utilization_flag} "
            f"{maximum:g} (costs about {format_bytes(cost)} of KV)"
        )
    return CheckItem("max_utilization", o.engine, ok, f"{o.utilization:.3f}", f"≤ {maximum:g}", message)


def _weights(o: EngineOutcome, maximum: float) -> CheckItem:
    fraction = o.weights_bytes / o.capacity_bytes
    ok = fraction <= maximum
    message = ""
    if not ok:
        tp = o.tensor_parallel_size
        while o.weights_bytes * o.tensor_parallel_size / (tp * o.capacity_bytes) > maximum:
            tp *= 2
        flag = "-tp" if o.engine == "vllm" else "--tp-size"
        message = (
            f"weights take {fraction:.1%} of the card ({format_bytes(o.weights_bytes)} per rank) > "
            f"{maximum:.0%}; shard wider ({flag} {tp}) or load a quantised checkpoint"
        )
    return CheckItem("max_weights_fraction", o.engine, ok, f"{fraction:.3f}", f"≤ {maximum:g}", message)


def _host_memory(o: EngineOutcome, maximum: float) -> CheckItem:
    host = o.host_tier
    if host is None:
        return CheckItem("max_host_memory_fraction", o.engine, True, "no host tier", f"≤ {maximum:g}", "")
    fraction = host.fraction_of_host or 0.0
    ok = fraction <= maximum and host.status != "fail"
    message = "" if ok else f"{host.message}; the host tier may use at most {maximum:.0%}: lower {host.flag}"
    return CheckItem("max_host_memory_fraction", o.engine, ok, f"{fraction:.3f}", f"≤ {maximum:g}", message)


def _items_for(o: EngineOutcome, req: Requirements, settings: ServeSettings) -> list[CheckItem]:
    # The GPU side of a plan whose only failure is the host tier still has its KV pool: the KV requirements are
    # judged on it, `must_fit` (and max_host_memory_fraction) carries the host failure.
    fits = o.verdict in ("fits", "host-pinned-memory-failure")
    items: list[CheckItem] = []
    if req.must_fit is not None:
        items.append(_must_fit(o, req.must_fit))
    if o.at_risk and not req.is_empty() and not req.allow_at_risk:
        items.append(at_risk_item(o))
    items.extend(_concurrency(o, c, fits, settings) for c in req.min_concurrency)
    if req.min_kv_tokens is not None:
        items.append(_kv_tokens(o, req.min_kv_tokens, fits, settings))
    if req.min_headroom_bytes is not None:
        items.append(_headroom(o, req.min_headroom_bytes))
    if req.max_utilization is not None:
        items.append(_utilization(o, req.max_utilization))
    if req.max_weights_fraction is not None:
        items.append(_weights(o, req.max_weights_fraction))
    if req.max_host_memory_fraction is not None:
        items.append(_host_memory(o, req.max_host_memory_fraction))
    return items


def evaluate(spec: DeploySpec, outcomes: tuple[EngineOutcome, ...]) -> tuple[CheckItem, ...]:
    """Every requirement against every engine's outcome."""
    return tuple(item for o in outcomes for item in _items_for(o, spec.requirements, spec.settings))


Planner = Callable[[ModelSpec, GpuSpec, ServeSettings], Any]


def _outcomes(
    spec: DeploySpec, model: ModelSpec, gpu: GpuSpec, vllm_planner: Planner | None
) -> list[EngineOutcome]:
    outcomes: list[EngineOutcome] = []
    if spec.engine in ("vllm", "both"):
        planner = vllm_planner
        if planner is None:
            from vramctl.core.plan import plan as default_planner

            planner = default_planner
        vllm_settings = replace(spec.settings, engine="vllm")
        result = planner(model, gpu, vllm_settings)
        outcomes.append(vllm_outcome(result, vllm_settings, model, gpu))
    if spec.engine in ("sglang", "both"):
        sglang_settings = replace(
            spec.settings,
            engine="sglang",
            engine_version=spec.engine_version if spec.engine == "sglang" else None,
        )
        plan = plan_sglang(model, gpu, sglang_settings, options=spec.sglang_options)
        outcomes.append(sglang_outcome(plan, sglang_settings, model, gpu))
    for n, o in enumerate(outcomes):
        if o.host_tier is not None and o.host_tier.status == "fail" and o.verdict == "fits":
            # The host pool cannot be pinned: the server does not start (as `vramctl plan` says).
            outcomes[n] = replace(
                o, verdict="host-pinned-memory-failure", verdict_message=str(o.host_tier.message)
            )
    return outcomes


def run_check(
    spec: DeploySpec, model: ModelSpec, gpu: GpuSpec, *, vllm_planner: Planner | None = None
) -> CheckResult:
    """Plan the spec's deployment with each engine and check every requirement.

    `vllm_planner` defaults to vramctl.core.plan.plan (imported lazily: plan imports the engines).
    """
    notes = list(spec.notes)
    outcomes = _outcomes(spec, model, gpu, vllm_planner)
    if spec.requirements.is_empty():
        notes.append("no requirements given: only the plan is shown (add `requirements:` to gate on it)")
    for o in outcomes:
        if o.host_tier is not None and o.host_tier.status in ("warning", "fail"):
            notes.append(f"{o.engine}: {o.host_tier.message}")
    items = evaluate(spec, tuple(outcomes))
    return CheckResult(
        spec=spec,
        model_name=model.name,
        gpu_name=gpu.display_name
        if spec.gpu_memory_bytes is None
        else f"{gpu.display_name} ({format_bytes(spec.gpu_memory_bytes)})",
        outcomes=tuple(outcomes),
        items=items,
        notes=tuple(notes),
    )
