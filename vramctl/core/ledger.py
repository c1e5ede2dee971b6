"""A budget is a ledger: named terms, each with a source, that sum exactly to the device capacity.

`plan` (estimated), `profile` (measured) and `read-log` (given: read from a log) all produce a Ledger,
so they print and compare the same way. The sum is asserted at construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vramctl.core.errors import LedgerError


class TermSource(StrEnum):
    MEASURED = "measured"
    """Measured on a device (profile)."""
    ESTIMATED = "estimated"
    """A formula (plan), with an uncertainty band."""
    GIVEN = "given"
    """A user override or a number read from a log."""
    DERIVED = "derived"
    """Follows exactly from other terms (the KV residual, the slack held back by utilisation)."""


# Term names: stable, used as JSON keys (docs/json.md). Never rename.
WEIGHTS = "weights"
ACTIVATION_PEAK = "activation_peak"
NON_TORCH = "non_torch"
CUDA_GRAPH = "cuda_graph"
KV_CACHE = "kv_cache"
SLACK = "slack"
"""Capacity the engine holds back: total − requested (vLLM (1 − u)·C; SGLang's reserve not in the pool)."""
OTHER_PROCESSES = "other_processes"
"""Memory other tenants hold on the device (only when known)."""
MAMBA_STATE = "mamba_state"
"""SGLang's MambaPool of a hybrid model: state slots × bytes per request (vramctl.core.engines.sglang)."""

TERM_ORDER = (OTHER_PROCESSES, WEIGHTS, ACTIVATION_PEAK, NON_TORCH, CUDA_GRAPH, KV_CACHE, MAMBA_STATE, SLACK)


@dataclass(frozen=True)
class Term:
    name: str
    bytes: int
    source: TermSource
    formula: str = ""
    """How the number was obtained, in words and symbols (`max_num_batched_tokens × hidden × 2 × 6`)."""
    uncertainty_bytes: int = 0
    """Half-width of the band around an estimate (0 for measured / given / derived)."""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "source": self.source.value,
            "formula": self.formula,
            "uncertainty_bytes": self.uncertainty_bytes,
            "note": self.note,
        }


@dataclass(frozen=True)
class Ledger:
    capacity_bytes: int
    terms: tuple[Term, ...]

    def __post_init__(self) -> None:
        names = [term.name for term in self.terms]
        if len(set(names)) != len(names):
            raise LedgerError(f"ledger has a duplicated term: {names}")
        total = sum(term.bytes for term in self.terms)
        if total != self.capacity_bytes:
            raise LedgerError(
                f"ledger terms sum to {total} bytes, not the capacity {self.capacity_bytes} bytes: {names}"
            )

    @classmethod
    def with_residual(
        cls,
        capacity_bytes: int,
        terms: Iterable[Term],
        residual: str = SLACK,
        residual_source: TermSource = TermSource.DERIVED,
        residual_formula: str = "capacity − every other term",
    ) -> Ledger:
        """Build a ledger whose last term is whatever makes the sum exact."""
        fixed = tuple(terms)
        rest = capacity_bytes - sum(term.bytes for term in fixed)
        return cls(capacity_bytes, (*fixed, Term(residual, rest, residual_source, residual_formula)))

    def get(self, name: str) -> Term | None:
        for term in self.terms:
            if term.name == name:
                return term
        return None

    def bytes_of(self, name: str) -> int:
        term = self.get(name)
        return 0 if term is None else term.bytes

    def as_mapping(self) -> Mapping[str, Term]:
        return {term.name: term for term in self.terms}

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {term.name: term.to_json() for term in self.terms}
