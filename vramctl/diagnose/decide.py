"""The fact record of one incident and the decision tables that turn it into a label.

`explain-oom` reads a log into incidents; each incident's facts are what the decision tables look at:

- the **phase** (from traceback frames and progress markers, per engine version),
- the **allocator's numbers** (`requested_bytes`, `total_bytes`, `free_bytes`, `allocated_bytes`,
  `reserved_unallocated_bytes`, `private_pools_bytes`, `this_process_bytes`, `other_process_bytes`),
- the **settings** the log printed (`gpu_memory_utilization`, `max_num_seqs`, ...),
- **hints**: words around the failure that name who allocated (`pinned`, `sampler`, `logprobs`, `multimodal`,
  `kv_alloc`, `non_torch`, `host_memory`, `bus_error`, ...),
- the engine,
- the **planned deployment** (`vramctl/diagnose/planfacts.py`): `planned_weights_per_rank_bytes`,
  `device_total_bytes`, `planned_budget_bytes`, `planned_kv_bytes`, `max_model_len_fits`, ... from `plan` of the
  deployment the log describes, used by the `planned-deployment` table when the wording decided with low confidence.

The tables are data (`decisions:` in catalogue.yaml, printed in docs/explain-oom.md): ordered rules, the first
whose condition holds decides. The catalogue maps each engine's wording to facts; the same table decides for every
wording of the same kind of failure. `decide()` runs a table on a `FactRecord` directly (the property tests
synthesise records; `markdown_table()` prints a table for the docs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from vramctl.diagnose.catalogue import Catalogue, load_catalogue
from vramctl.diagnose.facts import evaluate, fill

__all__ = ["Decision", "FactRecord", "decide", "markdown_table"]

NUMBER_FACTS = (
    "requested_bytes",
    "total_bytes",
    "free_bytes",
    "allocated_bytes",
    "reserved_unallocated_bytes",
    "reserved_bytes",
    "private_pools_bytes",
    "this_process_bytes",
    "other_process_bytes",
    "weights_bytes",
    "device_total_bytes",
    "planned_budget_bytes",
    "planned_weights_per_rank_bytes",
    "planned_kv_bytes",
)


@dataclass(frozen=True)
class FactRecord:
    """What one incident says, as the decision tables read it. Missing numbers are None (unknown)."""

    phase: str | None = None
    """A taxonomy phase placed by frames / markers, or None when nothing places the failure."""
    numbers: Mapping[str, int] = field(default_factory=dict)
    settings: Mapping[str, float] = field(default_factory=dict)
    hints: frozenset[str] = frozenset()
    markers: frozenset[str] = frozenset()
    """Phases the progress lines reached before the failure (`kv_alloc` once the KV cache was sized)."""
    engine: str | None = None
    decided: str | None = None
    """The label a table already gave (the `planned-deployment` table revises a low-confidence one: `cause_<label>`)."""
    words: Mapping[str, str] = field(default_factory=dict)
    """Word facts (`planned_model`, `planned_verdict`): named in an explanation, never compared."""

    def names(self) -> dict[str, object]:
        """The names a rule may use (the same names explain-oom builds from a log)."""
        out: dict[str, object] = {k: v for k, v in self.numbers.items() if v is not None}
        out.update(self.settings)
        for hint in self.hints:
            out["hint_" + hint] = True
        for marker in self.markers:
            out["marker_" + marker.replace("-", "_")] = True
        if self.phase is None:
            out["phase_unknown"] = True
        else:
            out["phase_" + self.phase.replace("-", "_")] = True
        if self.decided is not None:
            out["cause_" + self.decided.replace("-", "_")] = True
        out.update(self.words)
        out["engine_known"] = self.engine is not None
        if self.engine is not None:
            out["engine_" + self.engine] = True
        total = out.get("total_bytes")
        if isinstance(total, int) and total > 0:
            for fact, pct in (
                ("requested_bytes", "requested_pct"),
                ("allocated_bytes", "allocated_pct"),
                ("weights_bytes", "weights_pct"),
            ):
                amount = out.get(fact)
                if isinstance(amount, int):
                    out[pct] = round(100.0 * amount / total)
        return out


@dataclass(frozen=True)
class Decision:
    cause: str
    phase: str
    confidence: str
    why: str
    rule: int
    """The index of the rule that decided (-1: none held, the table's default)."""


def decide(
    record: FactRecord,
    table: str = "gpu-allocation",
    *,
    default: str = "activation-spike",
    catalogue: Catalogue | None = None,
) -> Decision:
    """Run one decision table on a fact record: the first rule whose condition holds decides."""
    cat = catalogue or load_catalogue()
    names = record.names()
    for name, expr in cat.constants:
        value = evaluate(expr, names)
        if value is not None:
            names[name] = value
    for index, rule in enumerate(cat.decisions[table]):
        if evaluate(rule.when, names):
            phase = rule.phase or "context"
            if phase == "context":
                phase = record.phase or "unknown"
            why = fill(rule.why, names) if rule.why else None
            return Decision(rule.cause or default, phase, rule.confidence or "low", why or "", index)
    return Decision(default, record.phase or "unknown", "low", "no rule of the table held", -1)


def markdown_table(table: str, catalogue: Catalogue | None = None) -> str:
    """The rules of a decision table as a Markdown table (docs/explain-oom.md)."""
    cat = catalogue or load_catalogue()
    lines = ["| # | when (facts) | label | phase | confidence |", "| ---: | --- | --- | --- | --- |"]
    for index, rule in enumerate(cat.decisions[table], 1):
        when = rule.when_text.replace("|", "\\|")
        lines.append(
            f"| {index} | `{when}` | `{rule.cause}` | {rule.phase or 'from the facts'} | {rule.confidence or '-'} |"
        )
    return "\n".join(lines) + "\n"
