"""The utilisation trade: how much KV a higher `--gpu-memory-utilization` buys, and what the thinner margin risks.

vLLM requests `ceil(total × u)` bytes (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0)) and everything that is not KV
(weights, activation peak, non-torch, graph pool) comes out of that request, so each step of u moves
`total × Δu` bytes straight into the KV pool. What stays held back, `total − ceil(total × u)`, is the only
margin for what the start-up profile did not see. The worked example names four ways it is spent
(the cause labels of docs/explain-oom.md labels): a CUDA-graph pool larger than estimated (`cuda-graph-capture-oom`,
"small requests fail at utilisation 0.97–0.98"), allocator fragmentation (`allocator-fragmentation`),
full-vocabulary logits for sampling / logprobs (`logprobs-spike`, `sampler-warmup-oom`), and a transient
for one long input (`activation-spike`).

Call (the vLLM planner does, with its own non-KV estimate):

    utilization_trade(total_bytes, non_kv_bytes, bytes_per_block, blocks_per_request, max_model_len,
                      utilizations=(0.90,), block_size=16, current=0.92)

- total_bytes: the CUDA total the engine reads (vLLM `total_memory`).
- non_kv_bytes: what the engine subtracts from the request (weights + activation peak + non-torch + graph
  estimate); it does not depend on u.
- bytes_per_block: the KV page of one block over all layers (vLLM page size × layers).
- blocks_per_request: cdiv(max_model_len, block_size) (for hybrid models, what one request needs).
- utilizations: extra values (the user's); the standard grid DEFAULT_UTILIZATIONS is always included.
- current: the utilisation in use (marked `current`, and the deltas are against it).

Each row: u, requested and held-back bytes, KV bytes, blocks, tokens, concurrency at max_model_len, and
the risk of the margin: `thin` below 2 GiB or 3 % of the card, `tight` below 4 GiB or 5 %, else `ok`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vramctl.core.errors import BadInputError
from vramctl.core.units import GiB, format_bytes

DEFAULT_UTILIZATIONS: tuple[float, ...] = (0.85, 0.88, 0.90, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98)
THIN_BYTES = 2 * GiB
THIN_FRACTION = 0.03
TIGHT_BYTES = 4 * GiB
TIGHT_FRACTION = 0.05

Risk = Literal["ok", "tight", "thin", "no-kv", "no-start", "at-risk"]
"""`no-start`: the engine refuses to start at this u (the plan's verdict there is not `fits`); `at-risk`: it starts
only if the estimates hold (not at the pessimistic edge of their bands). The planner sets these two."""

FAILURE_MODES = (
    "cuda-graph-capture-oom (graph pool above the estimate)",
    "allocator-fragmentation (reserved but unallocated blocks)",
    "logprobs-spike / sampler-warmup-oom (fp32 logits over the vocabulary)",
    "activation-spike (one long input's transient)",
)


@dataclass(frozen=True)
class UtilizationRow:
    utilization: float
    requested_bytes: int
    held_back_bytes: int
    kv_bytes: int
    num_blocks: int
    kv_tokens: int
    max_concurrency: float
    risk: Risk
    note: str
    current: bool = False
    delta_kv_bytes: int = 0
    """KV bytes gained (+) or lost (−) against the current utilisation."""
    delta_concurrency: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "utilization": self.utilization,
            "requested_bytes": self.requested_bytes,
            "held_back_bytes": self.held_back_bytes,
            "kv_bytes": self.kv_bytes,
            "num_blocks": self.num_blocks,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "risk": self.risk,
            "note": self.note,
            "current": self.current,
            "delta_kv_bytes": self.delta_kv_bytes,
            "delta_concurrency": round(self.delta_concurrency, 2),
        }


def margin_risk(held_back_bytes: int, total_bytes: int) -> tuple[Risk, str]:
    """Classify a held-back margin and say what it risks."""
    fraction = held_back_bytes / total_bytes if total_bytes else 0.0
    size = f"{format_bytes(held_back_bytes)} ({fraction:.1%}) held back"
    if held_back_bytes < THIN_BYTES or fraction < THIN_FRACTION:
        return "thin", (
            f"{size}: thin margin; any of {'; '.join(FAILURE_MODES)} can OOM a running server. "
            "Only on a dedicated card with a tested maximum prompt length."
        )
    if held_back_bytes < TIGHT_BYTES or fraction < TIGHT_FRACTION:
        return "tight", f"{size}: tight; a larger graph pool or a logprobs request can use it up"
    return "ok", f"{size}"


SGLANG_FRACTIONS: tuple[float, ...] = (0.75, 0.80, 0.85, 0.88, 0.90, 0.92, 0.94, 0.96)
"""The `--mem-fraction-static` grid of SGLang's trade (its defaults run 0.70 – 0.90 by card and parallelism)."""


def fraction_risk(
    fraction: float,
    held_back_bytes: int,
    total_bytes: int,
    *,
    gpu_mem_mib: float,
    reserve_mib: float,
    runtime_mib: float,
) -> tuple[Risk, str]:
    """Classify an SGLang `--mem-fraction-static`. SGLang holds back pre_model_load × (1 − f) for everything
    that is not static (activations, CUDA graphs, metadata); its own default, round((gpu_mem − reserved) /
    gpu_mem, 3) (`python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23)), is the largest fraction its heuristic considers safe. Above it: `tight`, less
    than the reserve (`runtime_mib` of it for activations at 1.5 MiB × chunk tokens and graphs). A held-back
    margin below the thresholds of `margin_risk` (2 GiB or 3 % of the card) is `thin` whatever the default."""
    if total_bytes > 0 and margin_risk(held_back_bytes, total_bytes)[0] == "thin":
        return margin_risk(held_back_bytes, total_bytes)
    size = f"{format_bytes(held_back_bytes)} held back"
    if reserve_mib <= 0 or gpu_mem_mib <= 0:
        return "ok", size
    default = round((gpu_mem_mib - reserve_mib) / gpu_mem_mib, 3)
    if fraction > default + 1e-9:
        left_mib = (1 - fraction) * gpu_mem_mib
        return "tight", (
            f"{size}: above SGLang's default {default:.3f}; (1 − {fraction:.3f}) × {gpu_mem_mib:.0f} MiB = "
            f"{left_mib:.0f} MiB < its reserve of {reserve_mib:.0f} MiB ({runtime_mib:.0f} MiB of it for a full "
            "prefill chunk's activations and the CUDA graphs): test the longest prompts before serving"
        )
    return "ok", size


def utilization_trade(
    total_bytes: int,
    non_kv_bytes: int,
    bytes_per_block: int,
    blocks_per_request: int,
    max_model_len: int,
    utilizations: Sequence[float] = (),
    *,
    block_size: int = 16,
    current: float | None = None,
) -> tuple[UtilizationRow, ...]:
    """One row per utilisation (the standard grid, the user's values and `current`), sorted by u."""
    if total_bytes <= 0:
        raise BadInputError(f"total memory {total_bytes} bytes: must be > 0")
    if bytes_per_block <= 0 or blocks_per_request <= 0 or max_model_len <= 0 or block_size <= 0:
        raise BadInputError(
            "bytes_per_block, blocks_per_request, block_size and max_model_len must be > 0 "
            f"(got {bytes_per_block}, {blocks_per_request}, {block_size}, {max_model_len})"
        )
    values = set(DEFAULT_UTILIZATIONS) | set(utilizations)
    if current is not None:
        values.add(current)
    for u in values:
        if not (isinstance(u, (int, float)) and math.isfinite(u) and 0 < u <= 1):
            raise BadInputError(f"--gpu-memory-utilization {u}: must be in (0, 1]")

    def row(u: float) -> UtilizationRow:
        requested = math.ceil(total_bytes * u)
        held = total_bytes - requested
        kv = requested - non_kv_bytes
        blocks = max(0, kv) // bytes_per_block
        concurrency = blocks / blocks_per_request
        tokens = int(concurrency * max_model_len)
        if blocks <= 0:
            risk: Risk = "no-kv"
            note = f"no KV blocks: the non-KV terms ({format_bytes(non_kv_bytes)}) exceed the request"
        else:
            risk, note = margin_risk(held, total_bytes)
        return UtilizationRow(u, requested, held, kv, blocks, tokens, concurrency, risk, note)

    rows = [row(u) for u in sorted(values)]
    if current is not None:
        base = next(r for r in rows if r.utilization == current)
        rows = [
            UtilizationRow(
                r.utilization,
                r.requested_bytes,
                r.held_back_bytes,
                r.kv_bytes,
                r.num_blocks,
                r.kv_tokens,
                r.max_concurrency,
                r.risk,
                r.note,
                current=r.utilization == current,
                delta_kv_bytes=max(0, r.kv_bytes) - max(0, base.kv_bytes),
                delta_concurrency=r.max_concurrency - base.max_concurrency,
            )
            for r in rows
        ]
    return tuple(rows)


def utilization_for_kv(total_bytes: int, non_kv_bytes: int, kv_bytes_needed: int) -> float:
    """The smallest u (3 decimals, rounded up) whose request leaves `kv_bytes_needed` of KV; may exceed 1."""
    needed = (non_kv_bytes + kv_bytes_needed) / total_bytes
    milli = math.ceil(needed * 1000)
    # Float noise can push an exact value (0.92) up one step: take the lower one when it really suffices.
    if math.ceil(total_bytes * (milli - 1) / 1000) - non_kv_bytes >= kv_bytes_needed:
        milli -= 1
    return milli / 1000
