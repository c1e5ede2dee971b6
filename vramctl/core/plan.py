"""`plan`: the budget of `vllm serve MODEL --flags` (and SGLang's) on a card, before touching it.

vLLM's subtraction by version (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), vLLM's release notes (github.com/vllm-project/vllm/releases)), per rank of the binding pipeline stage:

    requested = ceil(total × u)                                   (`vllm/v1/worker/utils.py:716-772`)
    kv        = requested − weights − activation peak − non-torch growth − [graph estimate, ≥0.20]
    blocks    = kv // bytes_per_block, minimum over ranks          (`kv_cache_planning.py:681`, `:1580-1594`)
    concurrency = blocks / blocks_per_request; tokens = int(concurrency × max_model_len)

The activation peak, non-torch and graph terms are estimates (vramctl.core.engines.vllm.estimates); the weights are the
checkpoint's bytes; the KV cache is the residual, or `--kv-cache-memory-bytes` exactly (which skips profiling and
ignores the utilisation, as vLLM does). The ledger is physical: it also shows what lives outside the budget (the
CUDA context, NCCL communicators, graphs before 0.20), so `slack` is the headroom left on the card.

This module only orchestrates: vLLM's rules live in the package `vramctl.core.engines.vllm` (`rules` holds every
version switch; `defaults`, `kv_manager`, `budget`, `ledger`, `explain`, `hybrid`, `messages`, `planner`), SGLang's
in `vramctl.core.engines.sglang`; the result type is `vramctl.core.plan_result.PlanResult`, the verdicts
`vramctl.core.verdicts.Verdict`. The names below stay importable from here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vramctl.core.engines.base import EnginePlan, EngineRules, KvPool
from vramctl.core.engines.sglang.result import (
    SglangEngine,
    _sglang_fraction_rows,
    _wants_hicache,
    sglang_only_result,
)
from vramctl.core.engines.vllm.defaults import (
    AUTO_MAX_MODEL_LEN,
    VALID_BLOCK_SIZES,
    VllmSettings,
    default_block_size_for,
    resolve_settings,
    validate,
)
from vramctl.core.engines.vllm.hybrid import HybridPlan
from vramctl.core.engines.vllm.kv_manager import kv_view_of_model, lora_slots_of, stage_weight_bytes
from vramctl.core.engines.vllm.planner import VllmEngine, plan_vllm, settings_record
from vramctl.core.engines.vllm.rules import OLDEST_VLLM_VERSION
from vramctl.core.engines.vllm.rules import graph_regime as _graph_regime
from vramctl.core.errors import BadInputError
from vramctl.core.plan_result import PlanEdge, PlanResult
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec, derived_warning
from vramctl.core.verdicts import (
    FITS,
    GPU_UTIL_EXCEEDS_FREE,
    HOST_PINNED_MEMORY_FAILURE,
    KV_POOL_OVERCOMMIT,
    KV_TOO_SMALL,
    NO_KV_CACHE_MEMORY,
    WEIGHTS_DO_NOT_FIT,
    Verdict,
)


def plan(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, *, sglang_options: Any = None
) -> PlanResult:
    """Plan one deployment for `settings.engine` (`vllm`, `sglang` or `both`).

    `settings.quantization` (`--quantization`) is applied to the model first, as the engines apply it
    (`vramctl.core.quantization`): a mismatch with the checkpoint is bad input; online FP8 / bitsandbytes
    shrink the weights, and the plan says so in its explanations.
    """
    from vramctl.core.fixes import find_fixes

    result = _plan_quantized(model, gpu, settings, sglang_options)
    fixes = find_fixes(
        result, settings, lambda changed: _plan_quantized(model, gpu, changed, sglang_options, light=True)
    )
    if model.derived is not None:  # every engine's plan says so first (vLLM's planner already did)
        line = derived_warning(model)
        if line not in result.warnings:
            result = replace(result, warnings=(line, *result.warnings))
    return replace(result, fixes=fixes) if fixes else result



def engine_rules(engine: str, *, sglang_options: Any = None) -> EngineRules:
    """The rules package of `engine` (`vllm` or `sglang`) behind the engine-neutral interface."""
    if engine == "vllm":
        return VllmEngine()
    if engine == "sglang":
        return SglangEngine(sglang_options)
    raise BadInputError(f"--engine {engine!r}: expected vllm or sglang")

def _plan_quantized(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, sglang_options: Any, *, light: bool = False
) -> PlanResult:
    from vramctl.core.quantization import apply_quantization_flag

    quantized = apply_quantization_flag(model, settings.quantization, engine=settings.engine)
    result = _plan_served_model(quantized.model, gpu, settings, sglang_options=sglang_options, light=light)
    if quantized.note is None:
        return result
    return replace(result, explanations=(quantized.note, *result.explanations))


def _plan_served_model(
    model: ModelSpec,
    gpu: GpuSpec,
    settings: ServeSettings,
    *,
    sglang_options: Any = None,
    light: bool = False,
) -> PlanResult:
    """Plan one deployment for `settings.engine` (`vllm`, `sglang` or `both`), the model as served.

    Only the engines asked for are planned. `vllm`: the vLLM plan. `sglang`: SGLang's sizing alone
    (`vramctl.core.engines.sglang.plan_sglang`) at the top level, no vLLM budget computed. `both`: the vLLM plan at the top, SGLang's under `sglang`, and the gap explained term by term.
    A host tier (`--kv-offloading-size`, `--enable-hierarchical-cache`, `--hicache-*`) is sized when asked for.
    `sglang_options` (a `vramctl.core.engines.sglang.SglangOptions`) carries SGLang's flags beyond ServeSettings
    (DP attention, DeepEP, speculative decoding, disaggregation role, post-capture sizing).
    """
    from vramctl.core.engines import sglang as sg
    from vramctl.core.host_tier import plan_host_tier

    sglang_plan = None
    if settings.engine in ("sglang", "both"):
        sglang_plan = sg.plan_sglang(model, gpu, settings, options=sglang_options)
    if settings.engine == "sglang" and sglang_plan is not None:
        # only the engine asked for: no vLLM budget behind SGLang's plan
        result = sglang_only_result(model, gpu, sglang_plan, settings_record(model, gpu, settings))
    else:
        result = plan_vllm(model, gpu, settings, light=light)
    gap: tuple[Any, ...] = ()
    if settings.engine == "both" and sglang_plan is not None:
        gap = () if light else sg.explain_gap(result, sglang_plan)
    host = None
    use_hicache = settings.engine == "sglang" or (settings.engine == "both" and _wants_hicache(settings))
    if sglang_plan is not None and use_hicache:
        host = plan_host_tier(
            model,
            gpu,
            settings,
            device_kv_tokens=sglang_plan.max_total_num_tokens,
            kv_bytes_per_token=sglang_plan.bytes_per_token,
            engine="sglang",
            page_size=sglang_plan.page_size,
        )
    elif settings.kv_offloading_size_gib is not None:
        host = plan_host_tier(
            model,
            gpu,
            settings,
            # the pool's token slots (blocks × block size), as `check` sizes the tier: one rule for both
            device_kv_tokens=result.num_blocks * result.block_size,
            kv_bytes_per_token=result.kv_bytes_per_token,
            engine="vllm",
        )
    result = replace(result, sglang=sglang_plan, gap=gap, host_tier=host)
    if settings.engine == "sglang" and sglang_plan is not None and not light:
        result = replace(
            result, utilization_table=_sglang_fraction_rows(model, gpu, settings, sglang_options, sglang_plan)
        )
    warnings = list(result.warnings)
    status = getattr(host, "status", None)
    if status == "fail" and result.verdict == FITS:
        # The GPU side fits but the host pool cannot be pinned: the server does not start (exit 1).
        return replace(
            result,
            warnings=tuple(warnings),
            verdict=HOST_PINNED_MEMORY_FAILURE,
            verdict_message=str(getattr(host, "message", "")),
        )
    if status in ("warning", "fail"):
        warnings.append(str(getattr(host, "message", "")))
    return replace(result, warnings=tuple(warnings))


__all__ = [
    "AUTO_MAX_MODEL_LEN",
    "FITS",
    "GPU_UTIL_EXCEEDS_FREE",
    "HOST_PINNED_MEMORY_FAILURE",
    "KV_POOL_OVERCOMMIT",
    "KV_TOO_SMALL",
    "NO_KV_CACHE_MEMORY",
    "OLDEST_VLLM_VERSION",
    "VALID_BLOCK_SIZES",
    "WEIGHTS_DO_NOT_FIT",
    "EnginePlan",
    "EngineRules",
    "HybridPlan",
    "KvPool",
    "PlanEdge",
    "PlanResult",
    "Verdict",
    "VllmSettings",
    "_graph_regime",
    "default_block_size_for",
    "engine_rules",
    "kv_view_of_model",
    "lora_slots_of",
    "plan",
    "plan_vllm",
    "resolve_settings",
    "stage_weight_bytes",
    "validate",
]
