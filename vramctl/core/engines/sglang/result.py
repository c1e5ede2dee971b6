"""`--engine sglang`: SGLang's plan put at the top of the plan result, and its side of the utilisation trade."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vramctl.core.engines.base import EnginePlan, KvPool
from vramctl.core.engines.sglang.budget import SglangPlan, plan_sglang
from vramctl.core.engines.sglang.options import SglangOptions
from vramctl.core.engines.vllm.defaults import VllmSettings
from vramctl.core.ledger import ACTIVATION_PEAK, CUDA_GRAPH
from vramctl.core.plan_result import PlanResult, engine_plan_fields
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import cdiv
from vramctl.core.utilization import UtilizationRow
from vramctl.core.verdicts import (
    WEIGHTS_DO_NOT_FIT,
    Verdict,
)


def _sglang_fraction_rows(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, options: Any, current: SglangPlan
) -> tuple[UtilizationRow, ...]:
    """SGLang's side of the utilisation trade: the same plan at each `--mem-fraction-static` of the grid and the
    one in use (SGLang's own sizing rerun, so every branch applies), with the held-back memory judged against
    the reserve SGLang's default is computed from (`fraction_risk`)."""
    from vramctl.core.engines import sglang as sg
    from vramctl.core.utilization import SGLANG_FRACTIONS, fraction_risk

    mfs = float(current.mem_fraction_static)
    if not 0 < mfs < 1 or current.verdict == WEIGHTS_DO_NOT_FIT:
        return ()
    reserve = current.reserve
    reserve_mib = float(reserve.total_mib) if reserve is not None else 0.0
    runtime_mib = float(reserve.activation_mib + reserve.graph_mib) if reserve is not None else 0.0
    gpu_mem_mib = float(current.gpu_mem_mib or 0)
    page = max(1, int(current.page_size))
    rows: list[UtilizationRow] = []
    for f in sorted({*SGLANG_FRACTIONS, mfs}):
        p = (
            current
            if f == mfs
            else sg.plan_sglang(model, gpu, settings.with_changes(mem_fraction_static=f), options=options)
        )
        tokens = int(p.max_total_num_tokens)
        held = int(p.held_back_bytes)
        if tokens <= 0:
            risk: Any = "no-kv"
            note = "no KV pool: the weights leave nothing of the static budget"
        else:
            risk, note = fraction_risk(
                f,
                held,
                int(p.capacity_bytes),
                gpu_mem_mib=gpu_mem_mib,
                reserve_mib=reserve_mib,
                runtime_mib=runtime_mib,
            )
        rows.append(
            UtilizationRow(
                f,
                int(p.capacity_bytes) - held,
                held,
                int(p.kv_cache_bytes),
                tokens // page,
                tokens,
                float(p.concurrency_at_context),
                risk,
                note,
                current=f == mfs,
            )
        )
    base = next(r for r in rows if r.current)
    return tuple(
        replace(
            r,
            delta_kv_bytes=max(0, r.kv_bytes) - max(0, base.kv_bytes),
            delta_concurrency=r.max_concurrency - base.max_concurrency,
        )
        for r in rows
    )


def _wants_hicache(settings: ServeSettings) -> bool:
    return (
        settings.enable_hierarchical_cache
        or bool(settings.hicache_size_gb)
        or settings.hicache_ratio is not None
    )


def sglang_engine_plan(sgp: SglangPlan, model: ModelSpec, *, fallback_len: int) -> EnginePlan:
    """SGLang's plan in engine-neutral terms: its ledger, its pool in pages, its verdict (`fallback_len`: the
    context when SGLang's is 0)."""
    page = max(1, int(sgp.page_size))
    tokens = int(sgp.max_total_num_tokens)
    context = int(sgp.context_len) or fallback_len
    return EnginePlan(
        engine="sglang",
        version=str(sgp.version),
        capacity_bytes=int(sgp.capacity_bytes),
        requested_bytes=int(sgp.capacity_bytes) - int(sgp.held_back_bytes),
        ledger=sgp.ledger,
        kv_pool=KvPool(
            kv_cache_bytes=int(sgp.kv_cache_bytes),
            bytes_per_token=int(sgp.bytes_per_token),
            block_size=page,
            num_blocks=tokens // page,
            blocks_per_request=cdiv(context, page),
            tokens=tokens,
            max_concurrency=float(sgp.concurrency_at_context),
            max_model_len=context,
            max_model_len_fit=min(tokens, model.max_position_embeddings),
        ),
        verdict=Verdict(str(sgp.verdict)),
        verdict_message=str(sgp.message),
        notes=tuple(sgp.notes),
    )


@dataclass(frozen=True)
class SglangEngine:
    """SGLang's rules package behind `vramctl.core.engines.base.EngineRules`."""

    options: SglangOptions | None = None

    @property
    def engine(self) -> str:
        return "sglang"

    def plan(self, model: ModelSpec, gpu: GpuSpec, settings: ServeSettings) -> EnginePlan:
        sgp = plan_sglang(model, gpu, settings, options=self.options)
        return sglang_engine_plan(sgp, model, fallback_len=model.max_position_embeddings)


def sglang_only_result(
    model: ModelSpec, gpu: GpuSpec, sgp: SglangPlan, record: VllmSettings
) -> PlanResult:
    """`--engine sglang` with no vLLM plan computed: SGLang's plan at the top level, `record` (the flags as a
    settings record, `vramctl.core.engines.vllm.planner.settings_record`) under `settings`. Outside the budget:
    what the process uses of the part SGLang holds back from its static fraction (`1 − mem_fraction_static`:
    the activation reserve and the graphs; the CUDA context is charged to the static part, since
    `profile_max_num_token` subtracts `total × (1 − mfs)` from the memory free after loading)."""
    ep = sglang_engine_plan(sgp, model, fallback_len=record.max_model_len)
    # the headline numbers in SGLang's semantics; no utilisation table, uncertainty band, edges or vLLM hybrid
    # section (PlanResult's defaults): SGLang sizes its pool from free memory it measures, and its state pool is
    # under `sglang.mamba` and its ledger's mamba_state term
    result = PlanResult(
        model=model,
        gpu=gpu,
        settings=record,
        **engine_plan_fields(ep),
        explanations=ep.notes,
        warnings=ep.warnings,
        outside_budget_bytes=ep.ledger.bytes_of(ACTIVATION_PEAK) + ep.ledger.bytes_of(CUDA_GRAPH),
        binding_stage=0,
        sglang=sgp,
    )
    return replace(result, settings_json=sglang_settings_json(sgp, result))


def sglang_settings_json(sgp: SglangPlan, result: PlanResult) -> dict[str, Any]:
    """`--engine sglang`'s `settings`: SGLang's own resolved settings (its version and flag names), not vLLM's."""
    s = result.settings
    return {
        "engine_version": sgp.version,
        "mem_fraction_static": sgp.mem_fraction_static,
        "mem_fraction_source": sgp.mem_fraction_source,
        "context_length": sgp.context_len,
        "chunked_prefill_size": sgp.chunked_prefill_size,
        "max_prefill_tokens": sgp.max_prefill_tokens,
        "max_running_requests": sgp.max_running_requests,
        "page_size": sgp.page_size,
        "cuda_graph_max_bs": sgp.cuda_graph_max_bs,
        "post_capture_kv_sizing": sgp.post_capture,
        "kv_cache_dtype": s.kv_cache_dtype,
        "dtype": s.dtype,
        "tensor_parallel_size": sgp.tensor_parallel_size,
        "pipeline_parallel_size": sgp.pipeline_parallel_size,
    }
