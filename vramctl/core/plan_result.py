"""The plan's result: `PlanResult` (what `plan --json` prints) and its edges (`PlanEdge`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from vramctl.core.engines.base import EnginePlan, KvPool
from vramctl.core.gap import GapItem
from vramctl.core.ledger import (
    Ledger,
)
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.utilization import UtilizationRow
from vramctl.core.verdicts import (
    FITS,
    Verdict,
)

if TYPE_CHECKING:
    from vramctl.core.engines.sglang.budget import SglangPlan
    from vramctl.core.engines.vllm.defaults import VllmSettings
    from vramctl.core.engines.vllm.hybrid import HybridPlan
    from vramctl.core.host_tier import HostTierPlan


@dataclass(frozen=True)
class PlanEdge:
    """The plan with every estimated term at one edge of its ± band (the activation peak, non-torch memory and
    the CUDA-graph pool all at their 90th-percentile error): the KV pool, blocks, tokens, concurrency, the largest
    fitting length and the verdict there. The weights are derived from the checkpoint and do not move."""

    kv_cache_bytes: int
    num_blocks: int
    kv_tokens: int
    max_concurrency: float
    max_model_len_fit: int
    verdict: str
    verdict_message: str

    @property
    def fits(self) -> bool:
        return self.verdict == FITS

    def to_json(self) -> dict[str, Any]:
        return {
            "kv_cache_bytes": self.kv_cache_bytes,
            "num_blocks": self.num_blocks,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_model_len_fit": self.max_model_len_fit,
            "verdict": str(self.verdict),
            "verdict_message": self.verdict_message,
        }


@dataclass(frozen=True)
class PlanResult:
    engine: str
    engine_version: str
    model: ModelSpec
    gpu: GpuSpec
    settings: VllmSettings
    ledger: Ledger
    capacity_bytes: int
    requested_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int
    bytes_per_block: int
    block_size: int
    num_blocks: int
    blocks_per_request: int
    kv_tokens: int
    max_concurrency: float
    max_model_len: int
    max_model_len_fit: int
    verdict: str
    verdict_message: str
    outside_budget_bytes: int
    """Memory the process holds that vLLM does not charge to `requested` (CUDA context, NCCL, graphs < 0.20)."""
    binding_stage: int
    utilization_table: tuple[UtilizationRow, ...] = ()
    sglang: SglangPlan | None = None
    """The SGLang engineer's SglangPlan for `--engine sglang|both` (None otherwise)."""
    gap: tuple[GapItem, ...] = ()
    host_tier: HostTierPlan | None = None
    warnings: tuple[str, ...] = ()
    explanations: tuple[str, ...] = ()
    hybrid: HybridPlan | None = None
    """A HybridPlan for Mamba / linear-attention hybrids (the state term, docs/hybrid.md); None otherwise."""
    kv_cache_uncertainty_bytes: int = 0
    """How much the KV pool shrinks at the pessimistic edge (the estimated terms' bands, summed)."""
    pessimistic: PlanEdge | None = None
    """The plan with every estimated term at the top of its band; None where the plan has no such band."""
    optimistic: PlanEdge | None = None
    engine_features: Any = None
    settings_json: dict[str, Any] | None = None
    """The `settings` key of the JSON when the top level is not vLLM's (`--engine sglang`: SGLang's resolved
    settings); None: `settings.to_json()`."""
    """vramctl.core.engines.vllm_features.EngineFeatures when ipc_cache / sleep / yarn / the suggestion apply."""
    fixes: tuple[Any, ...] = ()
    """For a plan that does not fit, or fits only if the estimates hold: the smallest single changes that make
    it fit at the pessimistic edge, each checked by planning it (vramctl.core.fixes.Fix)."""

    @property
    def fits(self) -> bool:
        return self.verdict == FITS

    @property
    def at_risk(self) -> bool:
        """Fits with the estimates, not at the pessimistic edge: the server may not start."""
        return self.verdict == FITS and self.pessimistic is not None and not self.pessimistic.fits

    @property
    def engine_plan(self) -> EnginePlan:
        """The top-level plan in engine-neutral terms (`vramctl.core.engines.base.EnginePlan`)."""
        return EnginePlan(
            engine=self.engine,
            version=self.engine_version,
            capacity_bytes=self.capacity_bytes,
            requested_bytes=self.requested_bytes,
            ledger=self.ledger,
            kv_pool=KvPool(
                kv_cache_bytes=self.kv_cache_bytes,
                bytes_per_token=self.kv_bytes_per_token,
                block_size=self.block_size,
                num_blocks=self.num_blocks,
                blocks_per_request=self.blocks_per_request,
                tokens=self.kv_tokens,
                max_concurrency=self.max_concurrency,
                max_model_len=self.max_model_len,
                max_model_len_fit=self.max_model_len_fit,
            ),
            verdict=Verdict(self.verdict),
            verdict_message=self.verdict_message,
            notes=self.explanations,
            warnings=self.warnings,
        )

    def with_engine_plan(self, ep: EnginePlan) -> PlanResult:
        """This result with `ep` at the top level: its engine, ledger, KV pool, verdict, notes and warnings."""
        return replace(self, **engine_plan_fields(ep), explanations=ep.notes, warnings=ep.warnings)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": self.engine,
            "engine_version": self.engine_version,
            "model": {
                "name": self.model.name,
                "architecture": self.model.architecture,
                "param_count": self.model.param_count,
                "weight_bytes": self.model.weight_bytes,
                "dtype": self.model.torch_dtype,
                "quantization": self.model.quantization,
                "max_position_embeddings": self.model.max_position_embeddings,
            },
            "gpu": {
                "name": self.gpu.name,
                "display_name": self.gpu.display_name,
                "total_bytes": self.capacity_bytes,
            },
            "settings": self.settings.to_json() if self.settings_json is None else dict(self.settings_json),
            "terms": self.ledger.to_json(),
            "capacity_bytes": self.capacity_bytes,
            "requested_bytes": self.requested_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "bytes_per_block": self.bytes_per_block,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "blocks_per_request": self.blocks_per_request,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_model_len": self.max_model_len,
            "max_model_len_fit": self.max_model_len_fit,
            "verdict": str(self.verdict),
            "verdict_message": self.verdict_message,
            "outside_budget_bytes": self.outside_budget_bytes,
            "binding_stage": self.binding_stage,
            "utilization_table": [row.to_json() for row in self.utilization_table],
            "sglang": _to_json_or_none(self.sglang),
            "gap": [_to_json_or_none(item) for item in self.gap],
            "host_tier": _to_json_or_none(self.host_tier),
            "warnings": list(self.warnings),
            "explanations": list(self.explanations),
        }
        if self.model.derived is not None:  # only derived plans carry the key: other plans' JSON is unchanged
            out["model"]["derived_from"] = self.model.derived.to_json()
        out["at_risk"] = self.at_risk
        out["kv_cache_uncertainty_bytes"] = self.kv_cache_uncertainty_bytes
        out["pessimistic"] = None if self.pessimistic is None else self.pessimistic.to_json()
        out["optimistic"] = None if self.optimistic is None else self.optimistic.to_json()
        out["fixes"] = [fix.to_json() for fix in self.fixes]
        if self.hybrid is not None:  # only hybrids carry the key: other plans' JSON is unchanged
            out["hybrid"] = self.hybrid.to_json()
        if self.engine_features is not None:  # likewise (vramctl.core.engines.vllm_features)
            out["engine_features"] = self.engine_features.to_json()
        mm = getattr(self.settings, "mm_encoder", None)
        if mm is not None:  # only multimodal plans carry the key (vramctl.core.engines.vllm.multimodal)
            out["multimodal_encoder"] = mm.to_json()
        return out


def _to_json_or_none(obj: Any) -> Any:
    if obj is None:
        return None
    to_json = getattr(obj, "to_json", None)
    return to_json() if callable(to_json) else obj


def engine_plan_fields(ep: EnginePlan) -> dict[str, Any]:
    """The top-level PlanResult fields an engine's plan decides: its engine and version, ledger, KV pool, verdict."""
    pool = ep.kv_pool
    return {
        "engine": ep.engine,
        "engine_version": ep.version,
        "ledger": ep.ledger,
        "capacity_bytes": ep.capacity_bytes,
        "requested_bytes": ep.requested_bytes,
        "kv_cache_bytes": pool.kv_cache_bytes,
        "kv_bytes_per_token": pool.bytes_per_token,
        "bytes_per_block": pool.bytes_per_token * pool.block_size,
        "block_size": pool.block_size,
        "num_blocks": pool.num_blocks,
        "blocks_per_request": pool.blocks_per_request,
        "kv_tokens": pool.tokens,
        "max_concurrency": pool.max_concurrency,
        "max_model_len": pool.max_model_len,
        "max_model_len_fit": pool.max_model_len_fit,
        "verdict": ep.verdict,
        "verdict_message": ep.verdict_message,
    }
