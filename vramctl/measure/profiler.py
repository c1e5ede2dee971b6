"""The profile sequence of vLLM ≥ 0.28, run on a real device against the reference model.

Order (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), `vllm/v1/worker/gpu_worker.py`, vLLM 0.33.0):
1. `init`: the device context, the tensor-parallel communicators (already created by the caller, before
   the snapshot, as `init_worker_distributed_environment` at line 504), a cuBLAS warm-up (16×16 mm and a
   linear with bias, lines 519-528), gc + empty_cache, then the **init snapshot** (line 541);
   requested = ceil(total × gpu_memory_utilization) and the free-memory check with vLLM's message
   (`vllm/v1/worker/utils.py:716-772`) → `StartupMemoryError`, exit 1.
2. `weights-load`: the reference model built on the device; weights = the change of torch-allocated bytes
   (vLLM's `DeviceMemoryProfiler`, `mem_utils.py:82-101`); on CPU the change of RSS.
3. `profiling`: peak reset, a snapshot, the max-shape forward (max_num_batched_tokens tokens over
   min(max_num_seqs, tokens) sequences) and the sampler warm-up, gc + empty_cache, a snapshot:
   total_consumed = init.free − after.free (CPU: the RSS growth since the init snapshot), transient
   headroom = after.torch_peak − after.torch_allocated (CPU: VmHWM − VmRSS) (`mem_utils.py:229-321`).
4. `graph-capture` (CUDA, not `--enforce-eager`): the decode step captured at the engine's default
   capture sizes into a throwaway pool against a minimal KV cache (`cuda_graphs.py`). CPU: no graphs.
5. The KV residual: requested − (total_consumed + transient) − graph estimate (when
   VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on, the default from 0.20); blocks = residual // bytes per
   block, the minimum across ranks; tokens and concurrency as vLLM logs them.
SGLang's numbers come from the same run: free before and after the weights (`python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23)).

`profile_rank` is one rank's measurement; `derive` turns the ranks' measurements into the result; the
`distributed` module runs one process per rank for `--tensor-parallel-size N`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vramctl.core import kv as kvmath
from vramctl.core.engines import vllm as vllm_rules
from vramctl.core.engines.vllm.budget import extensible_kv_bytes
from vramctl.core.errors import BadInputError
from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    KV_CACHE,
    NON_TORCH,
    OTHER_PROCESSES,
    SLACK,
    WEIGHTS,
    Ledger,
    Term,
    TermSource,
)
from vramctl.core.settings import LATEST_SGLANG_VERSION, ServeSettings, parse_version
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import vllm_format_gib
from vramctl.core.verdicts import Verdict
from vramctl.measure.device import DeviceBackend, DeviceInfo, Snapshot
from vramctl.measure.oom import StartupMemoryError, is_oom, oom_context, release, release_traceback, to_error

PhaseCallback = Callable[[str, str], None]
"""on_phase(phase, message): progress for the CLI (phase names as in the cause labels of docs/explain-oom.md)."""

# vLLM's CPU-backend scheduler defaults (OpenAI server: 2048·ws tokens / 128·ws sequences; `vllm/engine/arg_utils.py` (vLLM v0.33.0)).
_CPU_SERVER_TOKENS = 2048
_CPU_SERVER_SEQS = 128


# ----------------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ProfileRequest:
    """What to profile: the model, the serve flags (None = the engine default), the device."""

    spec: ModelSpec
    settings: ServeSettings = field(default_factory=ServeSettings)
    device: str = "cuda:0"
    device_memory_bytes: int | None = None
    """Emulate a device of this capacity (`--device-memory`)."""
    num_layers: int | None = None
    """Build only this many layers and scale the weights to the full depth (`--num-layers`)."""
    seed: int = 0


@dataclass(frozen=True)
class Resolved:
    """The engine settings after vLLM's defaults for this device and version."""

    engine_version: str
    gpu_memory_utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    kv_cache_dtype: str
    enforce_eager: bool
    estimate_cudagraphs: bool
    capture_sizes: tuple[int, ...]
    tensor_parallel_size: int
    dtype: str
    mem_fraction_static: float | None
    num_layers: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "engine_version": self.engine_version,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "block_size": self.block_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "enforce_eager": self.enforce_eager,
            "estimate_cudagraphs": self.estimate_cudagraphs,
            "cudagraph_capture_sizes": list(self.capture_sizes),
            "tensor_parallel_size": self.tensor_parallel_size,
            "dtype": self.dtype,
            "mem_fraction_static": self.mem_fraction_static,
            "num_layers": self.num_layers,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resolved:
        return cls(
            engine_version=str(data["engine_version"]),
            gpu_memory_utilization=float(data["gpu_memory_utilization"]),
            max_model_len=int(data["max_model_len"]),
            max_num_batched_tokens=int(data["max_num_batched_tokens"]),
            max_num_seqs=int(data["max_num_seqs"]),
            block_size=int(data["block_size"]),
            kv_cache_dtype=str(data["kv_cache_dtype"]),
            enforce_eager=bool(data["enforce_eager"]),
            estimate_cudagraphs=bool(data["estimate_cudagraphs"]),
            capture_sizes=tuple(int(s) for s in data["cudagraph_capture_sizes"]),
            tensor_parallel_size=int(data["tensor_parallel_size"]),
            dtype=str(data["dtype"]),
            mem_fraction_static=None
            if data.get("mem_fraction_static") is None
            else float(data["mem_fraction_static"]),
            num_layers=None if data.get("num_layers") is None else int(data["num_layers"]),
        )


def gpu_spec_for(info: DeviceInfo, total_bytes: int) -> GpuSpec | None:
    """The registry's card for this device (NVML / torch names are aliases), else one built from its total."""
    if info.kind != "cuda":
        return None
    from vramctl import registry

    if info.emulated_capacity_bytes is None:
        try:
            return registry.load_gpu(info.name)
        except Exception:
            pass
    try:
        return registry.gpu_from_capacity(total_bytes)
    except Exception:
        return None


def precheck(request: ProfileRequest) -> None:
    """The checks that need no device, run before any device or rank process starts (bad input: exit 2)."""
    from vramctl.measure.device import parse_device
    from vramctl.measure.model import Shard, torch_dtype_of

    s = request.settings
    parse_device(request.device)
    Shard.of(request.spec, tp_size=s.tensor_parallel_size, num_layers=request.num_layers)
    kvmath.kv_dtype_bytes(request.spec, s.kv_cache_dtype, model_dtype=s.dtype)
    if s.dtype != "auto":
        torch_dtype_of(s.dtype)
    if s.gpu_memory_utilization is not None and not 0 < s.gpu_memory_utilization <= 1:
        raise BadInputError(f"--gpu-memory-utilization {s.gpu_memory_utilization}: must be in (0, 1]")
    vllm_rules.resolve_version(s.engine_version)


def resolve(request: ProfileRequest, info: DeviceInfo, total_bytes: int) -> Resolved:
    """Fill the engine defaults. On a CUDA card: the settings `plan` resolves for the same model, card and flags
    (`vramctl.core.engines.vllm.planner.resolve_vllm`: scheduler table, block size, capture sizes, utilisation,
    the model's derived length), so profile, suggest and plan agree; on a CPU device, vLLM's CPU scheduler
    limits and no graphs."""
    s, spec = request.settings, request.spec
    version = vllm_rules.resolve_version(s.engine_version)
    tp = s.tensor_parallel_size
    if tp < 1:
        raise BadInputError(f"--tensor-parallel-size {tp}: must be at least 1")
    from vramctl.measure.model import Shard

    Shard.of(
        spec, tp_size=tp, num_layers=request.num_layers
    )  # divisibility and --num-layers, before any rank starts
    if s.pipeline_parallel_size != 1:
        raise BadInputError(
            "--pipeline-parallel-size: profile measures tensor parallelism only; use plan for pp > 1"
        )
    if s.mem_fraction_static is not None and not 0 < s.mem_fraction_static < 1:
        raise BadInputError(f"--mem-fraction-static {s.mem_fraction_static}: must be in (0, 1)")
    gpu = gpu_spec_for(info, total_bytes)
    if gpu is not None:
        from vramctl.core.engines.vllm.planner import resolve_vllm

        v = resolve_vllm(spec, gpu, s.with_changes(engine="vllm")).settings
        util, max_model_len, block_size = v.gpu_memory_utilization, v.max_model_len, v.block_size
        tokens, seqs, sizes = v.max_num_batched_tokens, v.max_num_seqs, v.cudagraph_capture_sizes
        estimate, eager = v.estimate_cudagraphs, v.enforce_eager
    else:
        util, max_model_len, tokens, seqs, block_size = _resolve_cpu(request, version)
        sizes, estimate, eager = (), False, s.enforce_eager
    # Validate the dtype names early (one clear line).
    kvmath.kv_dtype_bytes(spec, s.kv_cache_dtype, model_dtype=s.dtype)
    return Resolved(
        engine_version=version,
        gpu_memory_utilization=util,
        max_model_len=max_model_len,
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
        block_size=block_size,
        kv_cache_dtype=s.kv_cache_dtype,
        enforce_eager=eager,
        estimate_cudagraphs=bool(estimate),
        capture_sizes=tuple(sizes),
        tensor_parallel_size=tp,
        dtype=s.dtype,
        mem_fraction_static=s.mem_fraction_static,
        num_layers=request.num_layers,
    )


def _extensible(request: ProfileRequest, resolved: Resolved, device_kind: str) -> bool:
    """vLLM 0.34's extensible KV cache sizes this run's pool (`rules.extensible_kv_cache`): CUDA devices only."""
    s = request.settings
    return device_kind == "cuda" and vllm_rules.extensible_kv_cache(
        resolved.engine_version,
        requested=s.enable_extensible_kv_cache,
        kv_cache_memory_bytes=s.kv_cache_memory_bytes,
        vendor="nvidia",
    )


def _resolve_cpu(request: ProfileRequest, version: str) -> tuple[float, int, int, int, int]:
    """A CPU device (no GpuSpec): the utilisation, length, vLLM's CPU scheduler limits (`_CPU_SERVER_*`) and
    block size; no graphs are captured there."""
    s, spec = request.settings, request.spec
    sem = vllm_rules.semantics(version)
    tp = s.tensor_parallel_size
    util = s.gpu_memory_utilization if s.gpu_memory_utilization is not None else sem.default_utilization
    if not 0 < util <= 1:
        raise BadInputError(f"--gpu-memory-utilization {util}: must be in (0, 1]")
    max_model_len = s.max_model_len or spec.max_position_embeddings
    if max_model_len <= 0:
        raise BadInputError(f"--max-model-len {max_model_len}: must be positive")
    seqs = s.max_num_seqs if s.max_num_seqs is not None else _CPU_SERVER_SEQS * tp
    tokens = s.max_num_batched_tokens if s.max_num_batched_tokens is not None else _CPU_SERVER_TOKENS * tp
    if tokens <= 0 or seqs <= 0:
        raise BadInputError("--max-num-batched-tokens and --max-num-seqs must be positive")
    tokens, seqs = vllm_rules.apply_scheduler_caps(
        tokens, seqs, max_model_len, user_batched_tokens=s.max_num_batched_tokens is not None
    )
    block_size = s.block_size or vllm_rules.default_block_size(version)
    if block_size <= 0:
        raise BadInputError(f"--block-size {block_size}: must be positive")
    return util, max_model_len, tokens, seqs, block_size


# -------------------------------------------------------------------------------------------- measurement


@dataclass(frozen=True)
class RankMeasurement:
    """One rank's readings. `*_bytes` are at the model's full depth (scaled when `--num-layers` < depth)."""

    rank: int
    init: Snapshot
    after_weights: Snapshot
    before_profile: Snapshot
    after_profile: Snapshot
    requested_bytes: int
    weights_bytes: int
    weights_measured_bytes: int
    """The allocated-bytes change across building the (possibly sliced) model."""
    weight_tensor_bytes: int
    """Σ numel × element size of the built tensors (a cross-check of the measurement)."""
    unbuilt_weight_bytes: int
    """Weight bytes of the layers not built (`--num-layers`), added to weights and consumed."""
    layers_built: int
    layers_total: int
    total_consumed_bytes: int
    transient_peak_bytes: int
    cuda_graph_estimate_bytes: int
    cuda_graph_actual_bytes: int
    cuda_graph_samples_bytes: tuple[int, ...]
    phase_seconds: dict[str, float]
    other_processes_bytes: int = 0
    """Of the memory in use at the init snapshot, what other processes hold (NVML; host: total − free − RSS)."""

    @property
    def non_kv_bytes(self) -> int:
        """vLLM ≥0.28 non_kv_cache_memory = total_consumed + transient_peak_headroom."""
        return self.total_consumed_bytes + self.transient_peak_bytes

    @property
    def sglang_pre_load_free_bytes(self) -> int:
        return self.init.free_bytes

    @property
    def sglang_post_load_free_bytes(self) -> int:
        return self.after_weights.free_bytes - self.unbuilt_weight_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "snapshots": {
                "init": self.init.to_json(),
                "after_weights": self.after_weights.to_json(),
                "before_profile": self.before_profile.to_json(),
                "after_profile": self.after_profile.to_json(),
            },
            "requested_bytes": self.requested_bytes,
            "weights_bytes": self.weights_bytes,
            "weights_measured_bytes": self.weights_measured_bytes,
            "weight_tensor_bytes": self.weight_tensor_bytes,
            "unbuilt_weight_bytes": self.unbuilt_weight_bytes,
            "layers_built": self.layers_built,
            "layers_total": self.layers_total,
            "total_consumed_bytes": self.total_consumed_bytes,
            "transient_peak_bytes": self.transient_peak_bytes,
            "non_kv_bytes": self.non_kv_bytes,
            "cuda_graph_estimate_bytes": self.cuda_graph_estimate_bytes,
            "cuda_graph_actual_bytes": self.cuda_graph_actual_bytes,
            "cuda_graph_samples_bytes": list(self.cuda_graph_samples_bytes),
            "sglang_pre_load_free_bytes": self.sglang_pre_load_free_bytes,
            "sglang_post_load_free_bytes": self.sglang_post_load_free_bytes,
            "phase_seconds": dict(self.phase_seconds),
            "other_processes_bytes": self.other_processes_bytes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RankMeasurement:
        snaps = data["snapshots"]
        return cls(
            rank=int(data["rank"]),
            init=_snapshot_from_json(snaps["init"]),
            after_weights=_snapshot_from_json(snaps["after_weights"]),
            before_profile=_snapshot_from_json(snaps["before_profile"]),
            after_profile=_snapshot_from_json(snaps["after_profile"]),
            requested_bytes=int(data["requested_bytes"]),
            weights_bytes=int(data["weights_bytes"]),
            weights_measured_bytes=int(data["weights_measured_bytes"]),
            weight_tensor_bytes=int(data["weight_tensor_bytes"]),
            unbuilt_weight_bytes=int(data["unbuilt_weight_bytes"]),
            layers_built=int(data["layers_built"]),
            layers_total=int(data["layers_total"]),
            total_consumed_bytes=int(data["total_consumed_bytes"]),
            transient_peak_bytes=int(data["transient_peak_bytes"]),
            cuda_graph_estimate_bytes=int(data["cuda_graph_estimate_bytes"]),
            cuda_graph_actual_bytes=int(data["cuda_graph_actual_bytes"]),
            cuda_graph_samples_bytes=tuple(int(x) for x in data["cuda_graph_samples_bytes"]),
            phase_seconds={str(k): float(v) for k, v in data["phase_seconds"].items()},
            other_processes_bytes=int(data.get("other_processes_bytes", 0)),
        )


def _snapshot_from_json(data: dict[str, Any]) -> Snapshot:
    return Snapshot(
        free_bytes=int(data["free_bytes"]),
        total_bytes=int(data["total_bytes"]),
        torch_allocated_bytes=int(data["torch_allocated_bytes"]),
        torch_peak_bytes=int(data["torch_peak_bytes"]),
        torch_reserved_bytes=int(data["torch_reserved_bytes"]),
        process_bytes=int(data["process_bytes"]),
        timestamp=float(data["timestamp"]),
    )


def kv_torch_dtype(spec: ModelSpec, resolved: Resolved, model_dtype: Any) -> Any:
    """The cache tensor dtype, with the element size `core.kv` sizes blocks with (so the pool is exactly
    num_blocks × bytes_per_block): fp8 variants → uint8 (vllm/utils/torch_utils.py:40-66); 2 bytes → the
    model dtype when it is a 16-bit one, else bfloat16."""
    import torch

    size = kvmath.kv_dtype_bytes(spec, resolved.kv_cache_dtype, model_dtype=resolved.dtype)
    if size == 1:
        return torch.uint8
    if size == 2:
        return model_dtype if model_dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    return torch.float32


class ProfilingDisturbedError(StartupMemoryError):
    """Free memory grew during the profile run (another process released memory): vLLM's assertion. Exit 1."""


def _warm_up(device: str) -> None:
    """vLLM's cuBLAS / cuBLASLt handle warm-up before the init snapshot (gpu_worker.py:519-528)."""
    import torch
    import torch.nn.functional as F

    a = torch.randn(16, 16, device=device)
    _ = torch.mm(a, a)
    w = torch.randn(16, 16, device=device)
    b = torch.randn(16, device=device)
    _ = F.linear(a, w, b)
    del a, w, b, _


def _others_at(init: Snapshot, backend: DeviceBackend) -> int:
    """What other processes held at the init snapshot (the rest of total − free is this process's)."""
    pre = max(0, init.total_bytes - init.free_bytes)
    info = backend.info()
    if info.kind == "cpu":
        if info.emulated_capacity_bytes is not None:
            return 0
        return max(0, min(pre, pre - init.process_bytes))
    known = info.other_processes_bytes
    return max(0, min(pre, known)) if known is not None else 0


def profile_rank(
    request: ProfileRequest,
    resolved: Resolved,
    backend: DeviceBackend,
    *,
    rank: int = 0,
    group: Any = None,
    on_phase: PhaseCallback | None = None,
) -> RankMeasurement:
    """Run the sequence on one rank; every tensor it made is released before it returns."""
    import torch

    from vramctl.measure.model import ReferenceModel, layer_weight_bytes, split_tokens

    def phase(name: str, message: str) -> None:
        if on_phase is not None:
            on_phase(name, message)

    spec = request.spec
    dev = backend.torch_device
    seconds: dict[str, float] = {}
    model: Any = None
    current = "startup-check"
    snap: Snapshot | None = None
    try:
        t0 = time.perf_counter()
        phase(current, "device context, cuBLAS warm-up, init snapshot")
        _warm_up(dev)
        backend.synchronize()
        backend.empty_cache()
        init = backend.snapshot()
        snap = init
        requested = math.ceil(init.total_bytes * resolved.gpu_memory_utilization)
        # vLLM 0.34's extensible KV cache skips this check: the budget is only a cap
        # (`vllm/v1/worker/utils.py:783-797` (0.34.0))
        if init.free_bytes < requested and not _extensible(request, resolved, backend.kind):
            raise StartupMemoryError(
                vllm_rules.free_memory_error(
                    device=dev,
                    free=vllm_format_gib(init.free_bytes),
                    total=vllm_format_gib(init.total_bytes),
                    util=resolved.gpu_memory_utilization,
                    requested=vllm_format_gib(requested),
                    version=resolved.engine_version,
                )
                + f" [--gpu-memory-utilization {resolved.gpu_memory_utilization}: at most "
                f"{math.floor(init.free_bytes / init.total_bytes * 1000) / 1000} fits on {dev} now]"
            )
        seconds[current] = time.perf_counter() - t0

        current = "weights-load"
        t0 = time.perf_counter()
        phase(current, "random weights on the device")
        w0 = backend.allocated_reading()
        if backend.kind == "cpu":
            from vramctl.measure.model import Shard, check_host_room, planned_weight_bytes, torch_dtype_of

            shard = Shard.of(
                spec, tp_rank=rank, tp_size=resolved.tensor_parallel_size, num_layers=resolved.num_layers
            )
            element = (
                2
                if resolved.dtype == "auto"
                else int(torch.empty((), dtype=torch_dtype_of(resolved.dtype)).element_size())
            )
            check_host_room("the weights", planned_weight_bytes(spec, shard, element), init.free_bytes)
        model = ReferenceModel(
            spec,
            device=dev,
            dtype=resolved.dtype,
            num_layers=resolved.num_layers,
            tp_rank=rank,
            tp_size=resolved.tensor_parallel_size,
            group=group,
            seed=request.seed,
        )
        backend.synchronize()
        w1 = backend.allocated_reading()
        after_weights = backend.snapshot()
        snap = after_weights
        element = int(torch.empty((), dtype=model.dtype).element_size())
        unbuilt = sum(
            layer_weight_bytes(spec, model.shard, i, element)
            for i in range(model.shard.layers, spec.num_hidden_layers)
        )
        seconds[current] = time.perf_counter() - t0

        current = "profiling"
        t0 = time.perf_counter()
        lens = split_tokens(resolved.max_num_batched_tokens, resolved.max_num_seqs)
        phase(
            current,
            f"forward of {resolved.max_num_batched_tokens} tokens over {len(lens)} sequences + sampler",
        )
        backend.empty_cache()
        backend.reset_peak()
        before = backend.snapshot()
        gen = torch.Generator(device=dev)
        gen.manual_seed(request.seed)
        ids = torch.randint(0, spec.vocab_size, (sum(lens),), device=dev, generator=gen)
        hidden = model.forward(ids, lens)
        current = "sampler"
        logits = model.compute_logits(hidden)
        sampled = model.sampler_warmup(logits)
        backend.synchronize()
        del ids, hidden, logits, sampled
        backend.empty_cache()
        after = backend.snapshot()
        snap = after
        if backend.kind == "cuda" and init.free_bytes < after.free_bytes:
            # vLLM asserts init free ≥ free after profiling (gpu_worker.py:728-741, `vllm/v1/core/kv_cache_utils.py` (vLLM v0.33.0) item 4)
            raise ProfilingDisturbedError(
                f"Error in memory profiling. Initial free memory {vllm_format_gib(init.free_bytes)} GiB, current "
                f"free memory {vllm_format_gib(after.free_bytes)} GiB. This happens when other processes sharing "
                "the same container release GPU memory while vLLM is profiling during initialization. To fix "
                "this, ensure consistent GPU memory allocation or isolate vLLM in its own container. "
                f"[another process on {dev} freed memory during the measurement: profile again on a quiet device]"
            )
        consumed = backend.consumed_between(init, after) + unbuilt
        transient = max(0, after.torch_peak_bytes - after.torch_allocated_bytes)
        seconds["profiling"] = time.perf_counter() - t0

        current = "graph-capture"
        t0 = time.perf_counter()
        estimate = actual = 0
        samples: tuple[int, ...] = ()
        if resolved.capture_sizes and backend.supports_cuda_graphs:
            from vramctl.measure.cuda_graphs import profile_graph_memory

            phase(current, f"{len(resolved.capture_sizes)} decode graphs into a throwaway pool")
            graphs = profile_graph_memory(
                model,
                sizes=resolved.capture_sizes,
                max_num_seqs=resolved.max_num_seqs,
                block_size=resolved.block_size,
                kv_dtype=kv_torch_dtype(spec, resolved, model.dtype),
            )
            estimate, actual, samples = graphs.estimate_bytes, graphs.actual_bytes, graphs.samples_bytes
        seconds[current] = time.perf_counter() - t0
        measurement = RankMeasurement(
            rank=rank,
            init=init,
            after_weights=after_weights,
            before_profile=before,
            after_profile=after,
            requested_bytes=requested,
            weights_bytes=(w1 - w0) + unbuilt,
            weights_measured_bytes=w1 - w0,
            weight_tensor_bytes=model.weight_bytes(),
            unbuilt_weight_bytes=unbuilt,
            layers_built=model.shard.layers,
            layers_total=spec.num_hidden_layers,
            total_consumed_bytes=consumed,
            transient_peak_bytes=transient,
            cuda_graph_estimate_bytes=estimate,
            cuda_graph_actual_bytes=actual,
            cuda_graph_samples_bytes=samples,
            phase_seconds=seconds,
            other_processes_bytes=_others_at(init, backend),
        )
    except BaseException as exc:
        model = None
        release_traceback(exc)
        if isinstance(exc, Exception) and is_oom(exc):
            raise to_error(oom_context(exc, phase=current, device=dev, snapshot=snap)) from None
        raise
    del model
    release()
    return measurement


# ------------------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class SglangNumbers:
    """SGLang's KV pool from the same run: KV = free_after_load − free_before_load × (1 − mfs)."""

    mem_fraction_static: float
    fraction_source: str
    """`given` (--mem-fraction-static) or `default` (SGLang's heuristic for this card)."""
    pre_load_free_bytes: int
    post_load_free_bytes: int
    kv_cache_bytes: int
    cell_bytes_per_token: int
    max_total_num_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": "sglang",
            "engine_version": LATEST_SGLANG_VERSION,
            "mem_fraction_static": self.mem_fraction_static,
            "mem_fraction_static_source": self.fraction_source,
            "pre_model_load_free_bytes": self.pre_load_free_bytes,
            "post_model_load_free_bytes": self.post_load_free_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "cell_size_bytes": self.cell_bytes_per_token,
            "max_total_num_tokens": self.max_total_num_tokens,
        }


@dataclass(frozen=True)
class ProfileResult:
    """The measured budget in `plan`'s JSON schema (terms `source: measured`) plus the raw readings."""

    model: ModelSpec
    device: DeviceInfo
    resolved: Resolved
    ranks: tuple[RankMeasurement, ...]
    binding_rank: int
    ledger: Ledger
    requested_bytes: int
    kv_cache_bytes: int
    bytes_per_block: int
    num_blocks: int
    blocks_per_request: int
    kv_bytes_per_token: int
    kv_tokens: int
    max_concurrency: float
    max_model_len_fit: int
    verdict: str
    cuda_graph_applied_bytes: int
    sglang: SglangNumbers | None
    notes: tuple[str, ...]
    environment: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @property
    def binding(self) -> RankMeasurement:
        return self.ranks[self.binding_rank]

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": "vllm",
            "engine_version": self.resolved.engine_version,
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
                "name": self.device.name,
                "display_name": self.device.name,
                "total_bytes": self.ledger.capacity_bytes,
            },
            "settings": self.resolved.to_json(),
            "terms": self.ledger.to_json(),
            "capacity_bytes": self.ledger.capacity_bytes,
            "requested_bytes": self.requested_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "bytes_per_block": self.bytes_per_block,
            "block_size": self.resolved.block_size,
            "num_blocks": self.num_blocks,
            "blocks_per_request": self.blocks_per_request,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": self.max_concurrency,
            "max_model_len": self.resolved.max_model_len,
            "max_model_len_fit": self.max_model_len_fit,
            "verdict": str(self.verdict),
            "source": "measured",
            "device": self.device.to_json(),
            "measurements": {
                "binding_rank": self.binding_rank,
                "non_kv_bytes": self.binding.non_kv_bytes,
                "cuda_graph_applied_bytes": self.cuda_graph_applied_bytes,
                "ranks": [r.to_json() for r in self.ranks],
            },
            "sglang": None if self.sglang is None else self.sglang.to_json(),
            "notes": list(self.notes),
            "environment": dict(self.environment),
            "wall_seconds": self.wall_seconds,
        }


def sglang_default_fraction(spec: ModelSpec, total_bytes: int, tp: int, info: DeviceInfo) -> float:
    """SGLang's default --mem-fraction-static for this card (`vramctl.core.engines.sglang`, `python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23)).

    On a CUDA device the registry's card supplies nvidia-smi's total (SGLang's `gpu_mem`); on the cpu
    device (or an emulated capacity) the measured total stands in for it.
    """
    from vramctl import registry
    from vramctl.core.engines import sglang as sglang_rules

    gpu = gpu_spec_for(info, total_bytes) or registry.gpu_from_capacity(total_bytes)
    # the measured total, with the card's nvidia-smi − CUDA offset kept (sglang.gpu_mem_mib_for)
    settings = ServeSettings(engine="sglang", tensor_parallel_size=tp, gpu_memory_bytes=total_bytes)
    return float(sglang_rules.plan_sglang(spec, gpu, settings).mem_fraction_static)


def _blocks_per_request(spec: ModelSpec, resolved: Resolved) -> int:
    return kvmath.blocks_per_request(
        spec,
        max_model_len=resolved.max_model_len,
        block_size=resolved.block_size,
        max_num_batched_tokens=resolved.max_num_batched_tokens,
        version=parse_version(resolved.engine_version),
    )


def max_model_len_that_fits(spec: ModelSpec, resolved: Resolved, available_bytes: int) -> int:
    """vLLM `estimate_max_model_len`: the largest length in [1, max_model_len] whose KV fits (0 if none)."""

    def needed(length: int) -> int:
        return kvmath.per_request_kv_bytes(
            spec,
            max_model_len=length,
            block_size=resolved.block_size,
            max_num_batched_tokens=resolved.max_num_batched_tokens,
            version=parse_version(resolved.engine_version),
            kv_cache_dtype=resolved.kv_cache_dtype,
            tp=resolved.tensor_parallel_size,
            model_dtype=resolved.dtype,
        )

    if available_bytes <= 0 or needed(1) > available_bytes:
        return 0
    lo, hi = 1, resolved.max_model_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if needed(mid) <= available_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def derive(
    request: ProfileRequest,
    resolved: Resolved,
    info: DeviceInfo,
    ranks: list[RankMeasurement],
    *,
    environment: dict[str, Any] | None = None,
    wall_seconds: float = 0.0,
) -> ProfileResult:
    """The KV residual, blocks (min across ranks), tokens, concurrency, the ledger and SGLang's numbers."""
    spec = request.spec
    tp = resolved.tensor_parallel_size
    bpb = kvmath.bytes_per_block(
        spec,
        block_size=resolved.block_size,
        kv_cache_dtype=resolved.kv_cache_dtype,
        tp=tp,
        model_dtype=resolved.dtype,
    )
    sem = vllm_rules.semantics(resolved.engine_version)
    notes: list[str] = []

    extensible = _extensible(request, resolved, info.kind)

    def kv_of(r: RankMeasurement) -> tuple[int, int]:
        applied = r.cuda_graph_estimate_bytes if resolved.estimate_cudagraphs else 0
        if extensible:
            # vLLM 0.34's extensible KV cache (vramctl.core.engines.vllm.budget.extensible_kv_bytes): the pool is
            # sized after capture from what stays allocated (consumed + the graph pool), keeping the profiled
            # transient (+ the applied estimate) and a margin free; at most the profiled pool
            graph = r.cuda_graph_actual_bytes or r.cuda_graph_estimate_bytes if resolved.capture_sizes else 0
            kv = extensible_kv_bytes(
                r.requested_bytes,
                r.init.free_bytes,
                r.total_consumed_bytes + graph,
                r.transient_peak_bytes + applied,
            )
            return min(kv, r.requested_bytes - r.non_kv_bytes - applied), graph
        if sem.subtraction == "consumed":
            non_kv = r.non_kv_bytes
        else:
            # ≤0.26: non_kv = non_torch_increase + torch_peak_increase + weights (mem_utils.py, `vllm/utils/mem_utils.py` (vLLM v0.33.0)).
            non_torch_increase = r.after_profile.non_torch_bytes - r.init.non_torch_bytes
            peak_increase = r.after_profile.torch_peak_bytes - r.before_profile.torch_allocated_bytes
            non_kv = max(0, non_torch_increase) + max(0, peak_increase) + r.weights_bytes
        return r.requested_bytes - non_kv - applied, applied

    blocks = [max(0, kv_of(r)[0]) // bpb for r in ranks]
    binding = min(range(len(ranks)), key=lambda i: (blocks[i], i))
    r = ranks[binding]
    kv_bytes, applied = kv_of(r)
    num_blocks = max(0, kv_bytes) // bpb
    per_req = _blocks_per_request(spec, resolved)
    concurrency = num_blocks / per_req if per_req else 0.0
    kv_tokens = int(concurrency * resolved.max_model_len)
    fit_len = max_model_len_that_fits(spec, resolved, kv_bytes - bpb)
    if kv_bytes - bpb <= 0:
        verdict = Verdict.NO_KV_CACHE_MEMORY
        notes.append(vllm_rules.no_cache_memory_error(resolved.engine_version))
    elif fit_len < resolved.max_model_len:
        verdict = Verdict.KV_TOO_SMALL
        notes.append(
            f"a {resolved.max_model_len}-token request does not fit; --max-model-len {fit_len} would"
        )
    else:
        verdict = Verdict.FITS

    ledger = build_ledger(r, kv_bytes, applied, is_cpu=info.kind == "cpu", eager=resolved.enforce_eager)
    if info.kind == "cpu":
        notes.append(
            "cpu device: terms are RSS deltas of this process (torch keeps no CPU allocator statistics); "
            "the activation peak is VmHWM − VmRSS after the profile run; no CUDA graphs"
        )
        if info.extra.get("shared_host"):
            notes.append(
                f"cpu device: the host is shared with other processes, so the device is 90 % of the memory "
                f"available when the run started ({r.init.total_bytes / (1 << 30):.2f} GiB of the host's "
                f"{int(info.extra.get('host_total_bytes', 0)) / (1 << 30):.2f} GiB); `validate --from-profile` "
                "on this host uses the same size; --device-memory fixes it"
            )
    if r.layers_built < r.layers_total:
        notes.append(
            f"--num-layers {r.layers_built}: {r.layers_total - r.layers_built} layers not built; their "
            f"{r.unbuilt_weight_bytes:,} weight bytes are added to weights and consumed (linear scaling); the "
            "activation peak and graph pool are measured on the slice"
        )
    if spec.quantization:
        from vramctl.measure.model import weight_storage

        storage = weight_storage(spec)
        if storage is None:
            notes.append(
                f"{spec.name} is a {spec.quantization} checkpoint: the reference model holds its weights in "
                f"{resolved.dtype if resolved.dtype != 'auto' else spec.torch_dtype}, not the quantised format"
            )
        else:
            notes.append(
                f"{spec.name} is a {spec.quantization} checkpoint: projection and expert matrices are held as "
                f"{'fp8 (1 byte)' if storage == 'fp8' else 'packed 4-bit (0.5 byte, no scales)'} and "
                "dequantised one matrix at a time for each matmul, a transient the engine's kernels do not have"
            )
    if resolved.capture_sizes and not applied and r.cuda_graph_estimate_bytes:
        notes.append(
            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS off: the graph estimate is measured but not subtracted"
        )
    if tp > 1:
        notes.append(f"{tp} ranks; the minimum over ranks is rank {binding} ({blocks[binding]} blocks)")

    sglang = sglang_numbers(spec, resolved, ranks, info)
    if sglang.mem_fraction_static <= 0 or sglang.kv_cache_bytes <= 0:
        notes.append(
            f"SGLang: mem_fraction_static {sglang.mem_fraction_static:.3f} ({sglang.fraction_source}) leaves no KV "
            "pool on this device; pass --mem-fraction-static, or see `vramctl suggest` for the value that fits"
        )
    return ProfileResult(
        model=spec,
        device=info,
        resolved=resolved,
        ranks=tuple(ranks),
        binding_rank=binding,
        ledger=ledger,
        requested_bytes=r.requested_bytes,
        kv_cache_bytes=kv_bytes,
        bytes_per_block=bpb,
        num_blocks=num_blocks,
        blocks_per_request=per_req,
        kv_bytes_per_token=kvmath.kv_bytes_per_token(
            spec, kv_cache_dtype=resolved.kv_cache_dtype, tp=tp, model_dtype=resolved.dtype
        ),
        kv_tokens=kv_tokens,
        max_concurrency=round(concurrency, 4),
        max_model_len_fit=fit_len,
        verdict=verdict,
        cuda_graph_applied_bytes=applied,
        sglang=sglang,
        notes=tuple(notes),
        environment=environment or {},
        wall_seconds=wall_seconds,
    )


def build_ledger(r: RankMeasurement, kv_bytes: int, graph_bytes: int, *, is_cpu: bool, eager: bool) -> Ledger:
    """The measured terms of one rank; they sum to the device total (the slack is the free remainder).

    What was in use at the init snapshot splits into other processes' memory and this process's own
    (CUDA context, communicators, cuBLAS handles), which joins the non-torch term as vLLM's planner and
    `plan` book it: outside the utilisation budget (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0)).
    """
    init = r.init
    pre = init.total_bytes - init.free_bytes
    others = r.other_processes_bytes
    own_pre = pre - others
    unit = "RSS growth" if is_cpu else "free-memory drop"
    terms: list[Term] = []
    if others:
        terms.append(
            Term(
                OTHER_PROCESSES,
                others,
                TermSource.MEASURED,
                "host total − available − this process's RSS at the init snapshot"
                if is_cpu
                else "NVML: memory of the other processes on the device at the init snapshot",
                note="held by others before the engine starts; not charged to the utilisation budget",
            )
        )
    terms += [
        Term(
            WEIGHTS,
            r.weights_bytes,
            TermSource.MEASURED,
            "allocated-bytes change across building the model" + (" (RSS)" if is_cpu else ""),
        ),
        Term(
            NON_TORCH,
            own_pre + r.total_consumed_bytes - r.weights_bytes,
            TermSource.MEASURED,
            f"in use by this process before the init snapshot + consumed ({unit} since it) − weights",
            note=f"{own_pre / (1 << 30):.2f} GiB of it existed before the init snapshot (context, communicators, "
            "cuBLAS handles) and is not charged to gpu_memory_utilization",
        ),
        Term(
            ACTIVATION_PEAK,
            r.transient_peak_bytes,
            TermSource.MEASURED,
            "VmHWM − VmRSS after the profile run"
            if is_cpu
            else "torch peak − torch allocated after the profile run",
        ),
        Term(
            CUDA_GRAPH,
            graph_bytes,
            TermSource.MEASURED,
            "first + (n − 1) × max(second, 1 MiB) free-memory drops of the decode captures",
            note="no CUDA graphs on the cpu device"
            if is_cpu
            else ("--enforce-eager: no graphs" if eager else ""),
        ),
        Term(
            KV_CACHE,
            kv_bytes,
            TermSource.DERIVED,
            "requested − (consumed + activation peak) − graph estimate",
        ),
    ]
    return Ledger.with_residual(
        init.total_bytes,
        terms,
        residual=SLACK,
        residual_formula="free at init − requested: what stays free",
    )


def sglang_numbers(
    spec: ModelSpec, resolved: Resolved, ranks: list[RankMeasurement], info: DeviceInfo
) -> SglangNumbers:
    """SGLang's pool from the same readings (`python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23)): distributed MIN over ranks, page size 1."""
    tp = resolved.tensor_parallel_size
    total = ranks[0].init.total_bytes
    if resolved.mem_fraction_static is not None:
        mfs, source = resolved.mem_fraction_static, "given"
    else:
        mfs, source = sglang_default_fraction(spec, total, tp, info), "default"
    pre = min(r.sglang_pre_load_free_bytes for r in ranks)
    post = min(r.sglang_post_load_free_bytes for r in ranks)
    kv = int(post - pre * (1 - mfs))
    from vramctl.core.engines import sglang as sglang_rules

    cell = sglang_rules.cell_size(
        spec,
        ServeSettings(
            engine="sglang",
            tensor_parallel_size=tp,
            kv_cache_dtype=resolved.kv_cache_dtype,
            dtype=resolved.dtype,
        ),
    )
    tokens = max(0, kv) // cell if cell else 0
    return SglangNumbers(mfs, source, pre, post, kv, cell, tokens)


def requested_for(total_bytes: int, util: float) -> int:
    """vLLM `request_memory`: ceil(total × util)."""
    return math.ceil(total_bytes * util)
