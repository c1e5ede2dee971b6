"""One watch sample: the engine's scrape and the device's memory, mapped onto the plan's ledger terms.

The server's memory splits as the plan splits it: weights (given, or estimated from `--model`), the KV pool
(the engine's own numbers: vLLM's `kv_cache_memory_bytes`, or blocks × bytes per block), and the rest
(`transient`: activations, the allocator's cache, the CUDA context / non-torch memory — NVML cannot tell
these apart). Around the server: other processes and free memory. The terms sum to the device's capacity
(the Ledger asserts it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vramctl.core.ledger import KV_CACHE, OTHER_PROCESSES, WEIGHTS, Ledger, Term, TermSource
from vramctl.watch.devices import DeviceMemory
from vramctl.watch.engines import EngineMetrics

TRANSIENT = "transient"
"""The server's memory outside weights and the KV pool: activations, allocator cache, non-torch (CUDA context,
NCCL, cuBLAS workspaces); on the cpu device also the Python heap."""
FREE = "free"
WATCH_TERMS = (OTHER_PROCESSES, WEIGHTS, KV_CACHE, TRANSIENT, FREE)

UP = "up"
DOWN = "down"
RESTARTED = "restarted"


@dataclass(frozen=True)
class ServerSizes:
    """What the metrics do not say and the plan knows: the weights and one KV block's bytes."""

    weights_bytes: int | None = None
    kv_block_bytes: int | None = None
    kv_token_bytes: int | None = None
    """One token of KV over all layers: SGLang states its pool in tokens (`sglang:max_total_num_tokens`)."""
    source: str = ""


def kv_pool_bytes(engine: EngineMetrics | None, sizes: ServerSizes) -> int | None:
    if engine is None:
        return None
    if engine.kv_pool_bytes:
        return engine.kv_pool_bytes
    if sizes.kv_block_bytes and engine.num_blocks:
        return sizes.kv_block_bytes * engine.num_blocks
    if sizes.kv_token_bytes and engine.kv_pool_tokens:
        return sizes.kv_token_bytes * engine.kv_pool_tokens
    return None


def map_ledger(device: DeviceMemory, engine: EngineMetrics | None, sizes: ServerSizes) -> Ledger:
    """The device's capacity as a ledger: other processes, weights, KV pool, transient, free."""
    # RSS double-counts shared pages and NVML may lag: never let a term exceed what the capacity leaves
    server = min(device.server_bytes, device.capacity_bytes)
    weights = min(sizes.weights_bytes or 0, server)
    pool = kv_pool_bytes(engine, sizes)
    kv_resident = min(pool or 0, server - weights)
    other = min(device.other_bytes, device.capacity_bytes - server)
    terms = [
        Term(OTHER_PROCESSES, other, TermSource.MEASURED, "device used − the server's processes"),
        Term(
            WEIGHTS,
            weights,
            TermSource.ESTIMATED if sizes.weights_bytes else TermSource.GIVEN,
            f"weights of {sizes.source}" if sizes.weights_bytes else "unknown without --model",
        ),
        Term(
            KV_CACHE,
            kv_resident,
            TermSource.GIVEN,
            "the engine's KV pool (its /metrics)" if pool else "unknown: the engine states no pool size",
            note="" if pool is None or kv_resident == pool else f"{pool - kv_resident} bytes of the pool not resident",
        ),
        Term(TRANSIENT, server - weights - kv_resident, TermSource.DERIVED, "server − weights − KV pool"),
    ]
    return Ledger.with_residual(
        device.capacity_bytes, terms, residual=FREE, residual_source=TermSource.MEASURED, residual_formula="capacity − used"
    )


@dataclass(frozen=True)
class Sample:
    """One instant of a watch. `status` is up, down (the scrape failed: `error` says why) or restarted."""

    t: float
    status: str
    engine: EngineMetrics | None
    devices: tuple[DeviceMemory, ...]
    terms: Mapping[str, int]
    """The primary device's ledger (the one holding most of the server), term → bytes."""
    error: str = ""

    @property
    def up(self) -> bool:
        return self.status != DOWN

    @property
    def primary(self) -> DeviceMemory | None:
        if not self.devices:
            return None
        return max(self.devices, key=lambda d: (d.server_bytes, -d.index))

    def term(self, name: str) -> int:
        return int(self.terms.get(name, 0))

    @property
    def server_bytes(self) -> int:
        return self.term(WEIGHTS) + self.term(KV_CACHE) + self.term(TRANSIENT)

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "status": self.status,
            "error": self.error,
            "engine": None if self.engine is None else self.engine.to_json(),
            "devices": [d.to_json() for d in self.devices],
            "terms": dict(self.terms),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sample:
        t = data["t"]
        if isinstance(t, bool) or not isinstance(t, int | float):
            raise ValueError("t is not a time")
        status = str(data["status"])
        if status not in (UP, DOWN, RESTARTED):
            raise ValueError(f"unknown status {status!r}")
        terms = data.get("terms") or {}
        if not isinstance(terms, dict) or any(
            isinstance(v, bool) or not isinstance(v, int) for v in terms.values()
        ):
            raise ValueError("terms are not byte counts")
        engine = data.get("engine")
        return cls(
            t=float(t),
            status=status,
            engine=None if engine is None else EngineMetrics.from_json(engine),
            devices=tuple(DeviceMemory.from_json(d) for d in data.get("devices", [])),
            terms={str(k): int(v) for k, v in terms.items()},
            error=str(data.get("error", "")),
        )


def make_sample(
    t: float,
    status: str,
    engine: EngineMetrics | None,
    devices: tuple[DeviceMemory, ...],
    sizes: ServerSizes,
    error: str = "",
) -> Sample:
    sample = Sample(t, status, engine, devices, {}, error)
    primary = sample.primary
    if primary is None:
        return sample
    ledger = map_ledger(primary, engine, sizes)
    return Sample(t, status, engine, devices, {term.name: term.bytes for term in ledger.terms}, error)
