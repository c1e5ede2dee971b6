"""vLLM's budget per pipeline stage and its verdict, in the order vLLM meets its checks.

vLLM's subtraction by version (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), vLLM's release notes (github.com/vllm-project/vllm/releases)), per rank of the binding pipeline stage:

    requested = ceil(total × u)                                   (`vllm/v1/worker/utils.py:716-772`)
    kv        = requested − weights − activation peak − non-torch growth − [graph estimate, ≥0.20]
    blocks    = kv // bytes_per_block, minimum over ranks          (`kv_cache_planning.py:681`, `:1580-1594`)
    concurrency = blocks / blocks_per_request; tokens = int(concurrency × max_model_len)

"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from vramctl.core import kv as kvmath
from vramctl.core import lora
from vramctl.core.engines.vllm import estimates as est
from vramctl.core.engines.vllm import messages as M
from vramctl.core.engines.vllm import rules as V
from vramctl.core.engines.vllm.defaults import VllmSettings
from vramctl.core.engines.vllm.kv_manager import (
    _largest_fitting_len,
    _stage_bytes_per_block,
    kv_view_of_model,
    lora_slots_of,
)
from vramctl.core.errors import BadInputError
from vramctl.core.settings import parse_version
from vramctl.core.specs import GpuSpec, ModelSpec, dtype_bytes
from vramctl.core.units import GiB, vllm_format_gib
from vramctl.core.verdicts import (
    FITS,
    GPU_UTIL_EXCEEDS_FREE,
    KV_POOL_OVERCOMMIT,
    KV_TOO_SMALL,
    NO_KV_CACHE_MEMORY,
    WEIGHTS_DO_NOT_FIT,
)
from vramctl.core.weights import LoadTimeChange, mxfp4_load_change, rope_cache_bytes, stage_rank_weight_bytes


@dataclass(frozen=True)
class _Stage:
    index: int
    weights: int
    activation: est.Estimate
    non_torch: est.Estimate
    outside: est.Estimate
    graph: est.Estimate
    graph_charged: int
    kv_bytes: int
    bytes_per_block: int
    num_blocks: int


def _stage_budget(
    model: ModelSpec,
    kv_model: ModelSpec,
    s: VllmSettings,
    requested: int,
    *,
    stage: int,
    weights: int,
    layers: int,
    cal: est.Calibration,
    others_charged: int = 0,
    edge: int = 0,
) -> _Stage:
    """One pipeline stage's budget. `edge` +1 / −1 moves every estimated term to the top / bottom of its ± band
    (the pessimistic / optimistic edge of the plan); 0 is the estimate itself."""
    sem_kind = V.subtraction_kind(s.version)
    v0 = V.is_v0(s.version)
    tp, pp = s.tensor_parallel_size, s.pipeline_parallel_size
    act_bytes = dtype_bytes(s.dtype) if s.dtype else 2
    activation = est.activation_peak(
        model,
        max_num_batched_tokens=s.max_num_batched_tokens,
        max_num_seqs=s.max_num_seqs,
        tp=tp,
        v0=v0,
        last_pp_rank=stage == pp - 1,
        act_bytes=min(act_bytes, 2),
        cal=cal,
    )
    charges_nccl = V.charges_nccl_to_budget(s.version)
    non_torch = est.non_torch_charged(version_kind=sem_kind, tp=tp * pp, charges_nccl=charges_nccl, cal=cal)
    outside = est.pre_snapshot_overhead(tp=tp * pp, v0=charges_nccl, cal=cal)
    graph = est.graph_pool(
        model,
        capture_sizes=s.cudagraph_capture_sizes,
        layers_on_rank=layers,
        regime=V.graph_regime(s.version),
        tp=tp,
        cal=cal,
    )
    if edge:
        activation, non_torch, outside, graph = (
            _at_edge(e, edge) for e in (activation, non_torch, outside, graph)
        )
    graph_charged = graph.bytes if (s.estimate_cudagraphs and s.cudagraph_capture_sizes) else 0
    if s.kv_cache_memory_bytes is not None:
        kv_bytes = s.kv_cache_memory_bytes
    else:
        kv_bytes = requested - weights - activation.bytes - non_torch.bytes - graph_charged - others_charged
    bpb = _stage_bytes_per_block(kv_model, s, stage)
    blocks = max(0, kv_bytes // bpb) if kv_bytes > 0 else 0
    return _Stage(stage, weights, activation, non_torch, outside, graph, graph_charged, kv_bytes, bpb, blocks)


def _at_edge(e: est.Estimate, edge: int) -> est.Estimate:
    """The estimate moved to the edge of its band: + for the pessimistic edge, − for the optimistic one."""
    return replace(e, bytes=max(0, e.bytes + edge * e.uncertainty_bytes))



@dataclass(frozen=True)
class _Core:
    s: VllmSettings
    capacity: int
    requested: int
    binding: _Stage
    stages: tuple[_Stage, ...]
    num_blocks: int
    blocks_per_request: int
    kv_tokens: int
    concurrency: float
    verdict: str
    verdict_message: str
    max_model_len_fit: int
    other_processes: int
    non_kv_bytes: int
    """What vLLM subtracts from `requested` (weights + activation + non-torch growth + applied graph estimate)."""
    lora: lora.LoraSlots | None = None
    """The `--enable-lora` slots booked with each stage's weights."""
    load_change: LoadTimeChange | None = None
    """What vLLM's kernels add to the weights while loading them on this GPU (MXFP4 padding / scale copies)."""
    rope_bytes: int = 0
    """The rotary embeddings' cos/sin caches on every rank, booked with the weights (vramctl.core.weights)."""


def _core(
    model: ModelSpec,
    gpu: GpuSpec,
    s: VllmSettings,
    capacity: int,
    cal: est.Calibration = est.CALIBRATION,
    edge: int = 0,
) -> _Core:
    version = parse_version(s.version)
    requested = math.ceil(capacity * s.gpu_memory_utilization)
    kv_model = kv_view_of_model(model, s.version)
    tp, pp = s.tensor_parallel_size, s.pipeline_parallel_size
    load_change = mxfp4_load_change(
        model,
        tp=tp,
        ep=s.expert_parallel_size,
        compute_capability=gpu.compute_capability,
        vendor=gpu.vendor,
        lora=s.enable_lora,
    )
    rope = rope_cache_bytes(model, s.dtype)
    weights = tuple(
        w + rope
        for w in stage_rank_weight_bytes(
            model, tp=tp, pp=pp, dtype=s.dtype, ep=s.expert_parallel_size, load_change=load_change
        )
    )
    slots = lora_slots_of(model, s)
    if slots is not None:
        # allocated while the model loads: part of vLLM's "Model loading took"
        weights = tuple(w + extra for w, extra in zip(weights, slots.stage_bytes, strict=True))
    parts = kvmath.pp_partition(model.num_hidden_layers, pp)
    other = capacity - s.free_memory_bytes if s.free_memory_bytes is not None else 0
    others_charged = other if V.counts_other_processes(s.version) else 0
    stages = tuple(
        _stage_budget(
            model,
            kv_model,
            s,
            requested,
            stage=i,
            weights=weights[i],
            layers=parts[i],
            cal=cal,
            others_charged=others_charged,
            edge=edge,
        )
        for i in range(pp)
    )
    binding = min(stages, key=lambda st: (st.num_blocks, st.kv_bytes - st.bytes_per_block))
    num_blocks = binding.num_blocks
    bpr = kvmath.blocks_per_request(
        kv_model,
        max_model_len=s.max_model_len,
        block_size=s.block_size,
        max_num_batched_tokens=s.max_num_batched_tokens,
        version=version,
        pp=pp,
        async_scheduling=s.async_scheduling,
    )
    groups = max(1, len(kvmath.stage_layout(kvmath.stage_layer_kinds(kv_model, pp)[binding.index]).groups))
    concurrency = num_blocks / bpr if bpr else 0.0
    if version >= (0, 28, 0):
        kv_tokens = int(concurrency * s.max_model_len)
    else:
        kv_tokens = num_blocks // groups * s.block_size

    # The checks, in the order vLLM meets them.
    verdict, message = FITS, ""
    null_block = binding.bytes_per_block if version > (0, 11, 99) else 0
    available = binding.kv_bytes - null_block
    needed = kvmath.per_request_kv_bytes(
        kv_model,
        max_model_len=s.max_model_len,
        block_size=s.block_size,
        max_num_batched_tokens=s.max_num_batched_tokens,
        version=version,
        kv_cache_dtype=s.kv_cache_dtype,
        tp=tp,
        pp=pp,
        model_dtype=s.dtype,
        async_scheduling=s.async_scheduling,
    )
    fit_len = _largest_fitting_len(kv_model, s, available, model.vllm_max_model_len, version)
    snapshot_free = None
    if s.free_memory_bytes is not None:
        snapshot_free = s.free_memory_bytes - binding.outside.bytes
    checks_free = V.checks_free_memory(s.version)
    if (
        snapshot_free is not None
        and s.kv_cache_memory_bytes is None
        and not checks_free
        and not others_charged
        and snapshot_free < requested
    ):
        verdict = GPU_UTIL_EXCEEDS_FREE
        message = (
            f"vLLM {s.version} has no start-up check of free memory: it will request "
            f"{vllm_format_gib(requested)} GiB with about {vllm_format_gib(max(0, snapshot_free))} GiB free and "
            "run out of memory allocating the KV cache; lower --gpu-memory-utilization."
        )
    elif (
        snapshot_free is not None
        and s.kv_cache_memory_bytes is None
        and checks_free
        and snapshot_free < requested
    ):
        verdict = GPU_UTIL_EXCEEDS_FREE
        message = M.free_memory_error(
            device="cuda:0",
            free=vllm_format_gib(max(0, snapshot_free)),
            total=vllm_format_gib(capacity),
            util=s.gpu_memory_utilization,
            requested=vllm_format_gib(requested),
            version=s.version,
        )
    elif max(weights) > (requested if s.kv_cache_memory_bytes is None else capacity - other):
        verdict = WEIGHTS_DO_NOT_FIT
        limit = requested if s.kv_cache_memory_bytes is None else capacity - other
        message = (
            f"The weights alone ({max(weights) / GiB:.2f} GiB per rank) exceed the "
            f"{'requested budget' if s.kv_cache_memory_bytes is None else 'free memory'} ({limit / GiB:.2f} GiB): "
            "Failed to load model - not enough GPU memory."
        )
    elif (
        s.kv_cache_memory_bytes is not None
        and (over := max(st.weights + st.kv_bytes + st.outside.bytes for st in stages) - (capacity - other))
        > 0
    ):
        # Certain, not an estimate: the weights, the given pool and the CUDA context alone exceed the card.
        verdict = KV_POOL_OVERCOMMIT
        message = (
            f"--kv-cache-memory-bytes {s.kv_cache_memory_bytes / GiB:.2f} GiB + the weights ({max(weights) / GiB:.2f} "
            f"GiB per rank) + the CUDA context exceed the {(capacity - other) / GiB:.2f} GiB free by "
            f"{over / GiB:.2f} GiB: vLLM skips profiling and runs out of memory allocating the KV cache; lower "
            f"--kv-cache-memory-bytes below {max(0, s.kv_cache_memory_bytes - over) / GiB:.2f} GiB"
        )
    elif available <= 0 or num_blocks <= 0:
        verdict = NO_KV_CACHE_MEMORY
        message = M.no_cache_memory_error(s.version)
    elif V.is_v0(s.version) and num_blocks * s.block_size < s.max_model_len:
        verdict = KV_TOO_SMALL
        message = (
            f"The model's max seq len ({s.max_model_len}) is larger than the maximum number of tokens that can be "
            f"stored in KV cache ({num_blocks * s.block_size}). Try increasing `gpu_memory_utilization` or "
            "decreasing `max_model_len` when initializing the engine."
        )
    elif not V.is_v0(s.version) and needed > available:
        verdict = KV_TOO_SMALL
        message = M.one_request_error(
            max_model_len=s.max_model_len,
            needed=vllm_format_gib(needed) if version > (0, 11, 99) else f"{needed / GiB:.2f}",
            available=vllm_format_gib(available) if version > (0, 11, 99) else f"{available / GiB:.2f}",
            estimated=fit_len,
            version=s.version,
        )
    return _Core(
        s=s,
        capacity=capacity,
        requested=requested,
        binding=binding,
        stages=stages,
        num_blocks=num_blocks,
        blocks_per_request=bpr,
        kv_tokens=kv_tokens,
        concurrency=concurrency,
        verdict=verdict,
        verdict_message=message,
        max_model_len_fit=fit_len,
        other_processes=other,
        non_kv_bytes=binding.weights
        + binding.activation.bytes
        + binding.non_torch.bytes
        + binding.graph_charged,
        lora=slots,
        load_change=load_change,
        rope_bytes=rope,
    )



def _auto_fit(
    model: ModelSpec, gpu: GpuSpec, core: _Core, capacity: int, cal: est.Calibration, edge: int = 0
) -> tuple[_Core, str | None]:
    """`--max-model-len auto` / `-1` (PR #29431, 0.12 →): the full context if it fits, else the largest length
    that does (`kv_cache_planning.py:1337-1410`), with vLLM's log line or its error."""
    s = core.s
    if parse_version(s.version) < (0, 12, 0):
        raise BadInputError(
            f"--max-model-len auto: vLLM {s.version} has no auto-fit (added in 0.12, PR #29431)"
        )
    available = core.binding.kv_bytes - core.binding.bytes_per_block
    where = f"{vllm_format_gib(max(0, available))} GiB GPU"
    if core.verdict in (GPU_UTIL_EXCEEDS_FREE, WEIGHTS_DO_NOT_FIT, NO_KV_CACHE_MEMORY, KV_POOL_OVERCOMMIT):
        return core, None
    if core.verdict == FITS:
        return core, (
            f"Auto-fit max_model_len: full model context length {s.max_model_len} fits in available KV cache memory "
            f"({where})"
        )
    fit = core.max_model_len_fit
    if fit <= 0:
        failed = replace(
            core,
            verdict=NO_KV_CACHE_MEMORY,
            verdict_message="Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single "
            "token. Try increasing `gpu_memory_utilization`.",
        )
        return failed, None
    fitted = _core(model, gpu, replace(s, max_model_len=fit), capacity, cal, edge)
    return fitted, (
        f"Auto-fit max_model_len: reduced from {s.max_model_len} to {fit} to fit in available KV cache memory "
        f"({where})"
    )
