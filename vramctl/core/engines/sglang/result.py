"""`--engine sglang`: SGLang's plan put at the top of the plan result, and its side of the utilisation trade."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from vramctl.core.plan_result import PlanResult
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import cdiv
from vramctl.core.utilization import UtilizationRow
from vramctl.core.verdicts import (
    WEIGHTS_DO_NOT_FIT,
)


def _sglang_fraction_rows(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, options: Any, current: Any
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


def _sglang_top_level(result: PlanResult, sgp: Any) -> PlanResult:
    """`--engine sglang`: the headline numbers in SGLang's semantics (its ledger, pool, verdict)."""
    page = max(1, int(sgp.page_size))
    tokens = int(sgp.max_total_num_tokens)
    context = int(sgp.context_len) or result.max_model_len
    fit = min(tokens, result.model.max_position_embeddings)
    return replace(
        result,
        engine="sglang",
        engine_version=str(sgp.version),
        ledger=sgp.ledger,
        capacity_bytes=int(sgp.capacity_bytes),
        requested_bytes=int(sgp.capacity_bytes) - int(sgp.held_back_bytes),
        kv_cache_bytes=int(sgp.kv_cache_bytes),
        kv_bytes_per_token=int(sgp.bytes_per_token),
        bytes_per_block=int(sgp.bytes_per_token) * page,
        block_size=page,
        num_blocks=tokens // page,
        blocks_per_request=cdiv(context, page),
        kv_tokens=tokens,
        max_concurrency=float(sgp.concurrency_at_context),
        max_model_len=context,
        max_model_len_fit=fit,
        verdict=str(sgp.verdict),
        verdict_message=str(sgp.message),
        utilization_table=(),
        explanations=tuple(sgp.notes),
        warnings=(),
        kv_cache_uncertainty_bytes=0,  # SGLang sizes its pool from free memory it measures: no band to carry
        pessimistic=None,
        optimistic=None,
        hybrid=None,  # SGLang's state pool is under `sglang.mamba` and its ledger's mamba_state term
    )

