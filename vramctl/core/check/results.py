"""What `vramctl check` produces, render-neutral: each engine's numbers (EngineOutcome), each requirement's
verdict (CheckItem) and the whole result (CheckResult), with their JSON (docs/check.md); and the outcome of a
vLLM or SGLang plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramctl.core.check.spec import DeploySpec
from vramctl.core.engines.flags import EngineName
from vramctl.core.engines.sglang import SglangPlan
from vramctl.core.exit_codes import ExitCode
from vramctl.core.host_tier import HostTierPlan, plan_host_tier
from vramctl.core.ledger import SLACK, WEIGHTS
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import cdiv


@dataclass(frozen=True)
class EngineOutcome:
    """The numbers a requirement is checked against, for one engine."""

    engine: EngineName
    version: str
    verdict: str
    verdict_message: str
    capacity_bytes: int
    kv_cache_bytes: int
    kv_tokens: int
    context_len: int
    max_concurrency: float
    headroom_bytes: int
    utilization: float
    utilization_flag: str
    weights_bytes: int
    bytes_per_token: int
    block_size: int
    num_blocks: int
    bytes_per_block: int
    non_kv_bytes: int
    """vLLM: requested − KV (constant in u); SGLang: weights (KV = mfs × pre − weights)."""
    free_before_load_bytes: int
    host_tier: HostTierPlan | None = None
    tensor_parallel_size: int = 1
    kv_heads_per_rank: int = 1
    """KV heads each rank holds (MHA/GQA); TP splits them until one is left."""
    is_mla: bool = False
    blocks_per_request: int = 0
    """vLLM: blocks one max_model_len request needs (0 for SGLang)."""
    max_sequences: int = 0
    """The scheduler's cap on running sequences: vLLM max_num_seqs, SGLang max_running_requests."""
    max_sequences_flag: str = ""
    model_max_len: int = 0
    """The model's own context limit (config.json max_position_embeddings)."""
    at_risk: bool = False
    """Fits with the estimates, not at the pessimistic edge of their bands (vramctl.core.plan.PlanResult)."""
    pessimistic: Any = None
    """The plan at the pessimistic edge (a PlanEdge), where the plan has a band."""
    fixes: tuple[Any, ...] = ()

    def blocks_for(self, context: int) -> float:
        """vLLM blocks one request of `context` tokens needs: the planner's blocks_per_request at max_model_len
        (sliding-window layers capped), scaled for another length; cdiv(context, block_size) for full attention."""
        full = cdiv(context, self.block_size)
        if context == self.context_len:
            return float(self.blocks_per_request)
        at_len = cdiv(self.context_len, self.block_size)
        return self.blocks_per_request * full / at_len if at_len else float(full)

    def kv_concurrency_at(self, context: int) -> float:
        """Sequences of `context` tokens the KV pool holds at once (what the engines print)."""
        if self.engine == "vllm":
            blocks = self.blocks_for(context)
            return self.num_blocks / blocks if blocks else 0.0
        return self.kv_tokens / context

    def concurrency_at(self, context: int) -> float:
        """What can run at once: the KV pool's concurrency, capped by the scheduler's sequence limit; none when
        `context` is longer than the server's max_model_len / context_length (the engine refuses such requests)."""
        if context > self.context_len:
            return 0.0
        kv = self.kv_concurrency_at(context)
        return min(kv, float(self.max_sequences)) if self.max_sequences else kv

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "engine_version": self.version,
            "verdict": self.verdict,
            "verdict_message": self.verdict_message,
            "capacity_bytes": self.capacity_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_tokens": self.kv_tokens,
            "context_len": self.context_len,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_sequences": self.max_sequences,
            "headroom_bytes": self.headroom_bytes,
            "utilization": self.utilization,
            "utilization_flag": self.utilization_flag,
            "weights_bytes": self.weights_bytes,
            "bytes_per_token": self.bytes_per_token,
            "host_tier": None if self.host_tier is None else self.host_tier.to_json(),
            "at_risk": self.at_risk,
            "pessimistic": None if self.pessimistic is None else self.pessimistic.to_json(),
        }


@dataclass(frozen=True)
class CheckItem:
    requirement: str
    engine: EngineName
    ok: bool
    actual: str
    required: str
    message: str
    """For a failure: the numbers and the flag to change."""

    def to_json(self) -> dict[str, Any]:
        return {
            "requirement": self.requirement,
            "engine": self.engine,
            "ok": self.ok,
            "actual": self.actual,
            "required": self.required,
            "message": self.message,
        }


@dataclass(frozen=True)
class CheckResult:
    spec: DeploySpec
    model_name: str
    gpu_name: str
    outcomes: tuple[EngineOutcome, ...]
    items: tuple[CheckItem, ...]
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(item.ok for item in self.items)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.passed else ExitCode.CHECK_FAILED

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec.source,
            "name": self.spec.name,
            "model": self.model_name,
            "gpu": self.gpu_name,
            "engine": self.spec.engine,
            "passed": self.passed,
            "exit_code": int(self.exit_code),
            "failed": sum(1 for item in self.items if not item.ok),
            "engines": [outcome.to_json() for outcome in self.outcomes],
            "checks": [item.to_json() for item in self.items],
            "notes": list(self.notes),
        }



def vllm_outcome(result: Any, settings: ServeSettings, model: ModelSpec, gpu: GpuSpec) -> EngineOutcome:
    ledger = result.ledger
    capacity = int(result.capacity_bytes)
    kv_tokens_slots = int(result.num_blocks) * int(result.block_size)
    host = plan_host_tier(
        model,
        gpu,
        settings,
        device_kv_tokens=kv_tokens_slots,
        kv_bytes_per_token=int(result.kv_bytes_per_token),
        engine="vllm",
    )
    return EngineOutcome(
        engine="vllm",
        version=str(result.engine_version),
        verdict=str(result.verdict),
        verdict_message=str(result.verdict_message),
        capacity_bytes=capacity,
        kv_cache_bytes=int(result.kv_cache_bytes),
        kv_tokens=int(result.kv_tokens),
        context_len=int(result.max_model_len),
        max_concurrency=float(result.max_concurrency),
        headroom_bytes=ledger.bytes_of(SLACK),
        utilization=float(result.settings.gpu_memory_utilization),
        utilization_flag="--gpu-memory-utilization",
        weights_bytes=ledger.bytes_of(WEIGHTS),
        bytes_per_token=int(result.kv_bytes_per_token),
        block_size=int(result.block_size),
        num_blocks=int(result.num_blocks),
        bytes_per_block=int(result.bytes_per_block),
        non_kv_bytes=int(result.requested_bytes) - int(result.kv_cache_bytes),
        free_before_load_bytes=capacity,
        blocks_per_request=int(result.blocks_per_request),
        # vLLM 0.31 →: --max-num-active-seqs caps the running requests below the runner's max_num_seqs
        max_sequences=int(result.settings.max_num_active_seqs or result.settings.max_num_seqs),
        max_sequences_flag="--max-num-active-seqs" if result.settings.max_num_active_seqs else "--max-num-seqs",
        host_tier=host,
        tensor_parallel_size=settings.tensor_parallel_size,
        kv_heads_per_rank=max(1, model.num_key_value_heads // settings.tensor_parallel_size),
        is_mla=model.is_mla,
        model_max_len=model.max_position_embeddings,
        at_risk=bool(getattr(result, "at_risk", False)),
        pessimistic=getattr(result, "pessimistic", None),
        fixes=tuple(getattr(result, "fixes", ())),
    )


def sglang_outcome(
    plan: SglangPlan, settings: ServeSettings, model: ModelSpec, gpu: GpuSpec
) -> EngineOutcome:
    host = plan_host_tier(
        model,
        gpu,
        settings,
        device_kv_tokens=plan.max_total_num_tokens,
        kv_bytes_per_token=plan.bytes_per_token,
        engine="sglang",
        page_size=plan.page_size,
        version=plan.version,
    )
    return EngineOutcome(
        engine="sglang",
        version=plan.version,
        verdict=plan.verdict,
        verdict_message=plan.message,
        capacity_bytes=plan.capacity_bytes,
        kv_cache_bytes=plan.kv_cache_bytes,
        kv_tokens=plan.max_total_num_tokens,
        context_len=plan.context_len,
        max_concurrency=plan.concurrency_at_context,
        headroom_bytes=plan.ledger.bytes_of(SLACK),
        utilization=plan.mem_fraction_static,
        utilization_flag="--mem-fraction-static",
        weights_bytes=plan.weights_bytes,
        bytes_per_token=plan.bytes_per_token,
        block_size=plan.page_size,
        num_blocks=plan.max_total_num_tokens // max(1, plan.page_size),
        bytes_per_block=plan.bytes_per_token * plan.page_size,
        non_kv_bytes=plan.weights_bytes,
        free_before_load_bytes=plan.free_before_load_bytes,
        max_sequences=plan.max_running_requests,
        max_sequences_flag="--max-running-requests",
        host_tier=host,
        tensor_parallel_size=settings.tensor_parallel_size,
        kv_heads_per_rank=max(1, model.num_key_value_heads // settings.tensor_parallel_size),
        is_mla=model.is_mla,
        model_max_len=model.max_position_embeddings,
    )


