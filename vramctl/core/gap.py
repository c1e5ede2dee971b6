"""The gap between two engines' KV pools for one deployment, as reasons: one `GapItem` per term that differs.

SGLang's explanation against vLLM (`vramctl.core.engines.sglang.gap.explain_gap`, used by `plan --engine both`
and `vramctl diff --from vllm --to sglang`) returns these; the items sum to the difference of the two pools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class VllmResultLike(Protocol):
    """What explain_gap reads from vramctl.core.plan.PlanResult (duck-typed to keep engines independent)."""

    @property
    def kv_cache_bytes(self) -> int: ...


@dataclass(frozen=True)
class GapItem:
    """One reason vLLM's KV pool differs from SGLang's; `bytes` > 0 means vLLM has that much more KV."""

    name: str
    bytes: int
    sentence: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "sentence": self.sentence}
