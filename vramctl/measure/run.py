"""What the CLI calls: `run_profile` (one process or one per TP rank), `run_compare`, `run_validate`.

`run_validate` proves a KV size: on a fresh device state it builds the model, allocates the real KV pool of
the suggested size (every page written), runs the max-shape forward and the sampler under it, and on CUDA
captures the decode graphs at every capture size against that pool and replays them. It reports the free
memory actually left. An OOM in any phase is caught, memory is released, and it is explained with the phase
and the numbers (exit 5).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from vramctl.core.engines.flags import by_name, parse_bool
from vramctl.core.errors import BadInputError, DeviceOutOfMemoryError
from vramctl.core.units import format_bytes
from vramctl.measure.device import DeviceInfo, open_device
from vramctl.measure.environment import collect
from vramctl.measure.oom import is_oom, oom_context, release, release_traceback, to_error
from vramctl.measure.profiler import (
    PhaseCallback,
    ProfileRequest,
    ProfileResult,
    Resolved,
    _warm_up,
    derive,
    kv_torch_dtype,
    precheck,
    profile_rank,
    resolve,
)


def run_profile(
    request: ProfileRequest, *, on_phase: PhaseCallback | None = None, isolated: bool = False
) -> ProfileResult:
    """Profile the model on the device; `--tensor-parallel-size N` runs N rank processes.

    `isolated` runs even a single rank in a fresh process: on the cpu device the RSS a previous run in this
    process left to the allocator would otherwise make a second run look cheaper (`--compare` uses it).
    """
    start = time.perf_counter()
    precheck(request)
    if request.settings.tensor_parallel_size > 1 or isolated:
        from vramctl.measure.distributed import run_ranks

        resolved, info, ranks = run_ranks(request, on_phase=on_phase)
    else:
        backend = open_device(request.device, capacity_bytes=request.device_memory_bytes)
        info = backend.info()
        resolved = resolve(request, info, backend.snapshot().total_bytes)
        measurement = profile_rank(request, resolved, backend, on_phase=on_phase)
        ranks = [measurement]
    return derive(
        request,
        resolved,
        info,
        ranks,
        environment=collect(info),
        wall_seconds=round(time.perf_counter() - start, 3),
    )


# Flags `--compare` may flip, and how each maps onto ServeSettings / ProfileRequest.
COMPARE_FLAGS: dict[str, str] = {
    "enforce-eager": "bool",
    "max-num-batched-tokens": "int",
    "max-num-seqs": "int",
    "kv-cache-dtype": "str",
    "block-size": "int",
    "gpu-memory-utilization": "float",
    "max-model-len": "int",
    "dtype": "str",
    "tensor-parallel-size": "int",
    "num-layers": "int",
}


def parse_compare(text: str) -> tuple[str, Any]:
    """`max-num-seqs=64` / `--enforce-eager` / `enforce-eager=false` → (flag, typed value)."""
    raw = text.strip().lstrip("-")
    name, sep, value = raw.partition("=")
    name = name.strip().replace("_", "-")
    if name not in COMPARE_FLAGS:
        raise BadInputError(f"--compare {text!r}: unknown flag (use one of {', '.join(COMPARE_FLAGS)})")
    kind = COMPARE_FLAGS[name]
    value = value.strip()
    if kind == "bool":
        try:
            return name, parse_bool(value if sep else None, f"--compare {name}")
        except BadInputError:
            raise BadInputError(f"--compare {text!r}: {name} takes true or false") from None
    if not sep or not value:
        raise BadInputError(f"--compare {text!r}: expected {name}=VALUE")
    if name == "num-layers":
        try:
            return name, int(value.replace(",", "").replace("_", ""))
        except ValueError:
            raise BadInputError(f"--compare {text!r}: {value!r} is not an integer") from None
    try:  # read as the flag itself is (the one flag registry): `max-model-len=32k` as `--max-model-len 32k`
        return name, by_name(name).parse(value, f"--compare {name}")
    except BadInputError as exc:
        raise BadInputError(f"--compare {text!r}: {str(exc).split(': ', 1)[-1]}") from None


def with_flag(request: ProfileRequest, name: str, value: Any) -> ProfileRequest:
    """The request with one flag flipped."""
    if name == "num-layers":
        return replace(request, num_layers=int(value))
    field = name.replace("-", "_")
    return replace(request, settings=request.settings.with_changes(**{field: value}))


@dataclass(frozen=True)
class TermChange:
    name: str
    base_bytes: int
    other_bytes: int

    @property
    def delta_bytes(self) -> int:
        return self.other_bytes - self.base_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "term": self.name,
            "base_bytes": self.base_bytes,
            "other_bytes": self.other_bytes,
            "delta_bytes": self.delta_bytes,
        }


@dataclass(frozen=True)
class Comparison:
    flag: str
    value: Any
    result: ProfileResult
    changes: tuple[TermChange, ...]
    moved: tuple[str, ...]
    """Terms that moved by more than the noise threshold."""

    def to_json(self) -> dict[str, Any]:
        return {
            "flag": self.flag,
            "value": self.value,
            "changes": [c.to_json() for c in self.changes],
            "moved": list(self.moved),
            "num_blocks": self.result.num_blocks,
            "kv_cache_bytes": self.result.kv_cache_bytes,
            "result": self.result.to_json(),
        }


def compare(
    base: ProfileResult, other: ProfileResult, flag: str, value: Any, *, noise_bytes: int
) -> Comparison:
    """Which terms moved between two profiles (|Δ| > noise), plus the KV and block counts."""
    names = [t.name for t in base.ledger.terms]
    for t in other.ledger.terms:
        if t.name not in names:
            names.append(t.name)
    changes = tuple(TermChange(n, base.ledger.bytes_of(n), other.ledger.bytes_of(n)) for n in names)
    moved = tuple(c.name for c in changes if abs(c.delta_bytes) > noise_bytes)
    return Comparison(flag, value, other, changes, moved)


def noise_threshold(info: DeviceInfo) -> int:
    """Below this a change is measurement noise: 2 MiB on CUDA (allocator granularity), 8 MiB of RSS on CPU."""
    return (8 if info.kind == "cpu" else 2) * 1024 * 1024


# ----------------------------------------------------------------------------------------------- validate


@dataclass(frozen=True)
class ValidateResult:
    device: DeviceInfo
    resolved: Resolved
    model_name: str
    kv_cache_memory_bytes: int
    num_blocks: int
    bytes_per_block: int
    init_free_bytes: int
    total_bytes: int
    free_after_kv_bytes: int
    free_left_bytes: int
    """Free memory after everything (weights, KV pool, forward, graphs) is in place."""
    worst_free_bytes: int
    """free_left − the transient peak of the forward above what stayed allocated: the tightest moment."""
    min_free_bytes: int
    graphs_captured: int
    graph_pool_bytes: int
    passed: bool
    phase_seconds: dict[str, float]
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "gpu": self.device.name,
            "device": self.device.to_json(),
            "settings": self.resolved.to_json(),
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "num_blocks": self.num_blocks,
            "bytes_per_block": self.bytes_per_block,
            "total_bytes": self.total_bytes,
            "init_free_bytes": self.init_free_bytes,
            "free_after_kv_bytes": self.free_after_kv_bytes,
            "free_left_bytes": self.free_left_bytes,
            "worst_free_bytes": self.worst_free_bytes,
            "min_free_bytes": self.min_free_bytes,
            "graphs_captured": self.graphs_captured,
            "graph_pool_bytes": self.graph_pool_bytes,
            "passed": self.passed,
            "verdict": "pass" if self.passed else "fail",
            "phase_seconds": dict(self.phase_seconds),
            "notes": list(self.notes),
        }


def run_validate(
    request: ProfileRequest,
    *,
    kv_cache_memory_bytes: int,
    min_free_bytes: int = 0,
    on_phase: PhaseCallback | None = None,
) -> ValidateResult:
    """Allocate the KV pool of `kv_cache_memory_bytes`, run the max-shape forward (and graphs) under it."""
    import torch

    from vramctl.core import kv as kvmath
    from vramctl.measure.model import ReferenceModel, split_tokens

    tp = request.settings.tensor_parallel_size
    if kv_cache_memory_bytes <= 0:
        raise BadInputError(f"--kv-cache-memory-bytes {kv_cache_memory_bytes}: must be positive")

    def phase(name: str, message: str) -> None:
        if on_phase is not None:
            on_phase(name, message)

    precheck(request)
    backend = open_device(request.device, capacity_bytes=request.device_memory_bytes)
    info = backend.info()
    resolved = resolve(request, info, backend.snapshot().total_bytes)
    spec = request.spec
    bpb = kvmath.bytes_per_block(
        spec,
        block_size=resolved.block_size,
        kv_cache_dtype=resolved.kv_cache_dtype,
        tp=tp,
        model_dtype=resolved.dtype,
    )
    if resolved.num_layers is not None and resolved.num_layers < spec.num_hidden_layers:
        raise BadInputError("validate: --num-layers is not allowed (validate allocates the whole model)")
    num_blocks = kv_cache_memory_bytes // bpb
    if num_blocks < 1:
        raise BadInputError(
            f"--kv-cache-memory-bytes {kv_cache_memory_bytes}: smaller than one KV block ({bpb} bytes)"
        )
    notes: list[str] = []
    if tp > 1:
        notes.append(
            f"tensor parallel {tp}: rank 0's shard validated alone on {backend.torch_device} (no communicators)"
        )
    seconds: dict[str, float] = {}
    model: Any = None
    caches: Any = None
    current = "startup-check"
    snap = None
    detail = ""
    try:
        t0 = time.perf_counter()
        phase(current, "device context and init snapshot")
        _warm_up(backend.torch_device)
        backend.empty_cache()
        init = backend.snapshot()
        snap = init
        seconds[current] = time.perf_counter() - t0

        current = "weights-load"
        t0 = time.perf_counter()
        phase(current, "random weights on the device")
        if info.kind == "cpu":
            from vramctl.measure.model import Shard, check_host_room, planned_weight_bytes, torch_dtype_of

            element = (
                2
                if resolved.dtype == "auto"
                else int(torch.empty((), dtype=torch_dtype_of(resolved.dtype)).element_size())
            )
            check_host_room(
                "the weights",
                planned_weight_bytes(spec, Shard.of(spec, tp_size=tp), element),
                init.free_bytes,
            )
        # With tensor parallelism, rank 0's shard alone: the per-rank KV pool and activations, without the
        # communicators (they exist before vLLM's init snapshot, outside the budget).
        model = ReferenceModel(
            spec, device=backend.torch_device, dtype=resolved.dtype, tp_rank=0, tp_size=tp, seed=request.seed
        )
        backend.synchronize()
        snap = backend.snapshot()
        seconds[current] = time.perf_counter() - t0

        current = "kv-alloc"
        t0 = time.perf_counter()
        pool_bytes = num_blocks * bpb
        detail = f"allocating a {format_bytes(pool_bytes)} KV pool of {num_blocks} blocks"
        phase(current, detail)
        if info.kind == "cpu":
            from vramctl.measure.model import check_host_room

            check_host_room("the KV pool", pool_bytes, snap.free_bytes)
        caches = model.allocate_kv_cache(
            num_blocks, resolved.block_size, dtype=kv_torch_dtype(spec, resolved, model.dtype), touch=True
        )
        backend.synchronize()
        after_kv = backend.snapshot()
        snap = after_kv
        seconds[current] = time.perf_counter() - t0

        current = "serving"
        t0 = time.perf_counter()
        lens = split_tokens(resolved.max_num_batched_tokens, resolved.max_num_seqs)
        detail = f"max-shape forward of {resolved.max_num_batched_tokens} tokens + sampler under the pool"
        phase(current, detail)
        backend.empty_cache()
        backend.reset_peak()
        ids = torch.randint(0, spec.vocab_size, (sum(lens),), device=backend.torch_device)
        hidden = model.forward(ids, lens)
        logits = model.compute_logits(hidden)
        model.sampler_warmup(logits)
        backend.synchronize()
        del ids, hidden, logits
        backend.empty_cache()
        after_fwd = backend.snapshot()
        snap = after_fwd
        transient = max(0, after_fwd.torch_peak_bytes - after_fwd.torch_allocated_bytes)
        seconds[current] = time.perf_counter() - t0

        graphs = 0
        graph_pool = 0
        current = "graph-capture"
        t0 = time.perf_counter()
        if resolved.capture_sizes and backend.supports_cuda_graphs:
            from vramctl.measure.cuda_graphs import capture_graphs

            detail = f"capturing and replaying {len(resolved.capture_sizes)} decode graphs against the pool"
            phase(current, detail)
            measured = capture_graphs(
                model,
                caches,
                sizes=resolved.capture_sizes,
                num_blocks=num_blocks,
                block_size=resolved.block_size,
                replay=True,
            )
            graphs, graph_pool = len(measured.sizes), measured.actual_bytes
        elif info.kind == "cpu":
            notes.append("cpu device: no CUDA graphs to capture")
        seconds[current] = time.perf_counter() - t0
        final = backend.snapshot()
        free_left = final.free_bytes - (graph_pool if backend.supports_cuda_graphs else 0)
        # serving holds the graph pool while an eager max-shape batch runs: its transient comes on top of
        # the pool (the forward above ran before the capture, so the pool is subtracted here)
        worst = min(free_left, after_fwd.free_bytes - transient - graph_pool)
    except BaseException as exc:
        model = caches = None
        release_traceback(exc)
        if isinstance(exc, Exception) and is_oom(exc):
            raise to_error(
                oom_context(exc, phase=current, device=backend.torch_device, detail=detail, snapshot=snap)
            ) from None
        raise
    model = caches = None
    release()
    passed = worst >= min_free_bytes
    if not passed:
        notes.append(
            f"only {format_bytes(worst)} free at the tightest moment, below --min-free {format_bytes(min_free_bytes)}"
        )
    return ValidateResult(
        device=info,
        resolved=resolved,
        model_name=spec.name,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        num_blocks=num_blocks,
        bytes_per_block=bpb,
        init_free_bytes=init.free_bytes,
        total_bytes=init.total_bytes,
        free_after_kv_bytes=after_kv.free_bytes,
        free_left_bytes=free_left,
        worst_free_bytes=worst,
        min_free_bytes=min_free_bytes,
        graphs_captured=graphs,
        graph_pool_bytes=graph_pool,
        passed=passed,
        phase_seconds=seconds,
        notes=tuple(notes),
    )


__all__ = [
    "DeviceOutOfMemoryError",
    "ProfileRequest",
    "ProfileResult",
    "ValidateResult",
    "compare",
    "parse_compare",
    "run_profile",
    "run_validate",
]
