"""`--load-format ipc_cache`: weights held by a weight-cache daemon (`vllm preload`) and mapped over CUDA IPC.

The daemon (one per GPU; `python -m vllm.model_executor.model_loader.weight_cache.daemon` from 0.30, the
`vllm preload` subcommand from 0.31) holds the post-quantized, TP-sharded weights of its rank; the engine maps them
(`IpcModelLoader`, `mode` "zero_copy", the default) or clones them and asks the daemon to release its copy
(`mode` "copy", `--model-loader-extra-config '{"mode": "copy"}'`). What vLLM's budget makes of it, by version:

- **0.30.0 – 0.31.x** (`vllm/v1/worker/utils.py:534-554` in 0.30.0, `:539-558` in 0.31.0): `request_memory` has no
  notion of external weights. The init snapshot is taken while the daemon holds them, so the start-up check
  `free ≥ u × total` must fit the daemon's weights *outside* the budget, and the mapped weights never lower free
  memory, so they are not charged either: the KV pool is requested − activation − non-torch − graphs. At the
  default u 0.92 on an 80 GB card the check fails as soon as the weights exceed about 5 GiB; the
  fix is a lower u, not a smaller model.
- **0.32.0 →** (`vllm/v1/worker/utils.py:716-772`; `vllm/v1/worker/gpu_worker.py:528-537` in 0.32.0, `:535-544` in
  0.33.0): `get_external_weight_memory()` asks the daemon, and `request_memory(init_snapshot, cache_config,
  external_weight_memory)` returns engine_memory = requested − external. engine_memory ≤ 0 raises "Externally
  held weights on device … exceed the desired GPU memory utilization (…)"; free < engine_memory raises "… is less
  than the engine's budget after excluding external process's weights (…)". The KV pool is then what a disk load
  gets (the weights back inside u × total). 0.32 reports the daemon's `memory_allocated()`
  (`weight_cache/daemon.py:419-424`), which also counts daemon-only buffers, so its KV is slightly smaller; 0.33
  reports `exported_weight_bytes` (`daemon.py:188-210`, `:475-482`), the mapped storages only.
- **copy mode** (every version): the engine owns its clone, so nothing is external (0.32 →
  `ipc_loader.py:121-124`); the check still runs while the daemon holds its copy, and the clone's bytes are given
  back by the daemon's release before profiling ends: the same arithmetic as 0.30–0.31 zero-copy.
- Pipeline parallelism: refused by the daemon in 0.30–0.31 (`daemon.py:339` / `:473`), supported from 0.32.
  Sleep mode must not be used with zero-copy (`ipc_loader.py` class docstring): the weights are not in the
  CuMemAllocator pool.

vramctl models the daemon as another process on the card: its weights (the planned per-rank weights) plus its own
CUDA context (the same pre-snapshot estimate as the engine's). `--free-memory` is the free memory before either.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from vramctl.core.engines.vllm import estimates as est
from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.errors import BadInputError
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GiB, vllm_format_gib

MODES = ("zero_copy", "copy")

Rule = Literal["outside", "subtracted"]

CITATION = (
    "vllm/v1/worker/utils.py request_memory (0.30.0: lines 534-554, no external weights; 0.32.0/0.33.0: lines "
    "716-772, external_weight_memory subtracted); vllm/model_executor/model_loader/weight_cache/ipc_loader.py"
)


@dataclass(frozen=True)
class ExternalWeights:
    """The weight-cache daemon beside the engine, as vLLM `version` budgets it (per rank of the binding stage)."""

    version: str
    mode: str
    rule: Rule
    """`outside`: weights outside u × total and not charged (0.30–0.31 zero-copy, copy mode); `subtracted`:
    request_memory subtracts them from the budget (0.32 → zero-copy)."""
    daemon_weight_bytes: int
    daemon_overhead_bytes: int
    """The daemon's own CUDA context (and NCCL communicators above TP 1): it is another process."""
    free_before_bytes: int
    """Free memory before the daemon and the engine start (`--free-memory`, else the card's total)."""

    @property
    def daemon_bytes(self) -> int:
        return self.daemon_weight_bytes + self.daemon_overhead_bytes

    @property
    def launcher(self) -> str:
        if rules_for(self.version).preload_cli:
            return "vllm preload"
        return "python -m vllm.model_executor.model_loader.weight_cache.daemon"

    def to_json(self) -> dict[str, Any]:
        return {
            "load_format": "ipc_cache",
            "mode": self.mode,
            "rule": self.rule,
            "daemon_weight_bytes": self.daemon_weight_bytes,
            "daemon_overhead_bytes": self.daemon_overhead_bytes,
            "free_before_bytes": self.free_before_bytes,
            "launcher": self.launcher,
            "citation": CITATION,
        }


def wanted(settings: ServeSettings) -> bool:
    return (settings.load_format or "").strip().lower() == "ipc_cache"


def check(settings: ServeSettings, version: str) -> None:
    """Reject what vLLM `version` rejects: `ipc_cache` before 0.30, an unknown mode, PP before 0.32."""
    if not wanted(settings):
        if settings.weight_cache_mode is not None:
            raise BadInputError(
                f"weight cache mode {settings.weight_cache_mode!r}: only --load-format ipc_cache reads it"
            )
        return
    rules = rules_for(version)
    if not rules.ipc_cache_loader:
        raise BadInputError(
            f"--load-format ipc_cache: vLLM {version} has no weight-cache loader (added in 0.30.0, "
            "vllm/model_executor/model_loader/__init__.py)"
        )
    mode = settings.weight_cache_mode or "zero_copy"
    if mode not in MODES:
        raise BadInputError(
            f"Invalid weight cache mode {mode!r}, expected 'zero_copy' or 'copy' (ipc_loader.py, vLLM {version})"
        )
    if settings.pipeline_parallel_size > 1 and not rules.ipc_cache_pipeline:
        raise BadInputError(
            f"--load-format ipc_cache with --pipeline-parallel-size {settings.pipeline_parallel_size}: the weight "
            f"cache daemon of vLLM {version} rejects pipeline parallelism (supported from 0.32.0, "
            "weight_cache/daemon.py)"
        )


def resolve(
    settings: ServeSettings,
    version: str,
    *,
    weight_bytes: int,
    capacity: int,
    tp: int,
    cal: est.Calibration = est.CALIBRATION,
) -> ExternalWeights | None:
    """The daemon beside the engine, or None without `--load-format ipc_cache`."""
    if not wanted(settings):
        return None
    mode = settings.weight_cache_mode or "zero_copy"
    rule: Rule = (
        "subtracted" if mode == "zero_copy" and rules_for(version).external_weights_subtracted else "outside"
    )
    overhead = est.pre_snapshot_overhead(tp=tp, v0=False, cal=cal).bytes
    free = settings.free_memory_bytes if settings.free_memory_bytes is not None else capacity
    return ExternalWeights(version, mode, rule, weight_bytes, overhead, free)


def adjust(s: Any, ext: ExternalWeights | None) -> Any:
    """The resolved vLLM settings as the engine sees the card: free memory less what the daemon holds (its
    weights too under the `outside` rule, where they are not charged either; under `subtracted` the weights'
    drop in free memory and in the budget cancel)."""
    if ext is None:
        return s
    if ext.rule == "outside":
        free = ext.free_before_bytes - ext.daemon_bytes
        return replace(s, free_memory_bytes=max(0, free), weights_outside_budget=True)
    return replace(s, free_memory_bytes=max(0, ext.free_before_bytes - ext.daemon_overhead_bytes))


def external_weights_error(ext: ExternalWeights, *, total: int, util: float, requested: int) -> str:
    """vLLM 0.32 →'s refusal when the external weights reach the budget (utils.py:728-739)."""
    return (
        f"Externally held weights on device cuda:0 ({vllm_format_gib(ext.daemon_weight_bytes)}/"
        f"{vllm_format_gib(total)} GiB) exceed the desired GPU memory utilization ({util}, "
        f"{vllm_format_gib(requested)} GiB). Increase GPU memory utilization or reduce GPU memory used by other "
        "processes."
    )


def engine_budget_error(
    ext: ExternalWeights, *, snapshot_free: int, total: int, util: float, requested: int
) -> str:
    """vLLM 0.32 →'s refusal when free memory is below requested − external (utils.py:740-750)."""
    engine = requested - ext.daemon_weight_bytes
    return (
        f"Free memory on device cuda:0 ({vllm_format_gib(max(0, snapshot_free - ext.daemon_weight_bytes))}/"
        f"{vllm_format_gib(total)} GiB) on startup is less than the engine's budget after excluding external "
        f"process's weights ({util}, {vllm_format_gib(engine)} GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes."
    )


def largest_utilization(ext: ExternalWeights, *, total: int, engine_outside_bytes: int) -> float:
    """The largest u (2 decimals, floored) that passes the start-up check with the daemon resident."""
    room = ext.free_before_bytes - ext.daemon_bytes - engine_outside_bytes
    return max(0.0, int(room / total * 100) / 100) if total > 0 else 0.0


def notes(ext: ExternalWeights, *, total: int, requested: int, engine_outside_bytes: int) -> list[str]:
    """What the plan says about the daemon."""
    w, d = ext.daemon_weight_bytes / GiB, ext.daemon_overhead_bytes / GiB
    out = [
        f"--load-format ipc_cache ({ext.mode}): the weights ({w:.2f} GiB per rank) are held by the weight-cache "
        f"daemon (`{ext.launcher}`), a separate process with its own CUDA context (~{d:.2f} GiB), before the engine "
        "starts."
    ]
    if ext.rule == "outside":
        u_max = largest_utilization(ext, total=total, engine_outside_bytes=engine_outside_bytes)
        why = (
            "the engine owns its clone and the daemon releases its copy after loading (copy mode)"
            if ext.mode == "copy"
            else "request_memory has no external-weight accounting before 0.32 (vllm/v1/worker/utils.py)"
        )
        out.append(
            f"vLLM {ext.version}: {why}, so the start-up check `free ≥ u × total` runs with the daemon's weights "
            f"resident and outside the budget, and the KV pool is requested − activation − non-torch − graphs "
            f"(no weights). The largest --gpu-memory-utilization that starts is about {u_max:.2f}; the footprint "
            "is then the daemon plus u × total."
        )
    else:
        engine = requested - ext.daemon_weight_bytes
        counted = (
            "the mapped weight storages (exported_weight_bytes)"
            if rules_for(ext.version).external_weights_exported_bytes
            else "the daemon's torch.accelerator.memory_allocated(), which also counts daemon-only buffers: the KV "
            "pool can be a little smaller than a disk load's"
        )
        out.append(
            f"vLLM {ext.version} subtracts the externally held weights from the budget (request_memory "
            f"external_weight_memory, vllm/v1/worker/utils.py:716-772): of {vllm_format_gib(requested)} GiB, "
            f"{vllm_format_gib(ext.daemon_weight_bytes)} GiB is external and {vllm_format_gib(max(0, engine))} GiB "
            f"remains for the engine, so the KV pool equals a disk load's. The daemon reports {counted}."
        )
    return out
