"""What every engine's rules package gives the planner: an `EngineRules` that plans one deployment into an
engine-neutral `EnginePlan` (its ledger, KV pool, verdict and notes).

vLLM (`vramctl.core.engines.vllm.planner.VllmEngine`) and SGLang (`vramctl.core.engines.sglang.result.SglangEngine`)
both produce it; `vramctl.core.plan.PlanResult` carries one at its top level (`PlanResult.engine_plan`,
`PlanResult.with_engine_plan`), so `plan --engine sglang` puts SGLang's plan where vLLM's would be without
patching untyped slots. The JSON of a plan is `PlanResult.to_json`, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from vramctl.core.ledger import Ledger
from vramctl.core.verdicts import FITS, Verdict

if TYPE_CHECKING:
    from vramctl.core.settings import ServeSettings
    from vramctl.core.specs import GpuSpec, ModelSpec


@dataclass(frozen=True)
class KvPool:
    """The KV pool on the binding rank, in engine-neutral terms (a vLLM block is an SGLang page)."""

    kv_cache_bytes: int
    bytes_per_token: int
    block_size: int
    num_blocks: int
    blocks_per_request: int
    """Blocks one `max_model_len` request takes."""
    tokens: int
    """The token capacity the engine reports."""
    max_concurrency: float
    """Full-length requests the pool holds at once."""
    max_model_len: int
    max_model_len_fit: int
    """The largest length one request fits in (0 when not even one token does)."""


@dataclass(frozen=True)
class EnginePlan:
    """One engine's plan of one deployment: the ledger (every term, physical), the KV pool, the verdict."""

    engine: str
    version: str
    capacity_bytes: int
    requested_bytes: int
    """What the engine sizes against (vLLM: ceil(total × u); SGLang: total − what mem_fraction_static holds back)."""
    ledger: Ledger
    kv_pool: KvPool
    verdict: Verdict
    verdict_message: str
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return self.verdict == FITS


class EngineRules(Protocol):
    """An engine's rules package, as the planner uses it."""

    @property
    def engine(self) -> str:
        """The engine's name (`vllm`, `sglang`)."""
        ...

    def plan(self, model: ModelSpec, gpu: GpuSpec, settings: ServeSettings) -> EnginePlan:
        """The engine's plan of `model` on `gpu` with `settings` (BadInputError for flags it would refuse)."""
        ...
