"""vLLM's budget per pipeline stage and its verdict, in the order vLLM meets its checks.

vLLM's subtraction by version (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), vLLM's release notes (github.com/vllm-project/vllm/releases)), per rank of the binding pipeline stage:

    requested = ceil(total × u)                                   (`vllm/v1/worker/utils.py:716-772`)
    kv        = requested − weights − activation peak − non-torch growth − [graph estimate, ≥0.20]
    blocks    = kv // bytes_per_block, minimum over ranks          (`kv_cache_planning.py:681`, `:1580-1594`)

The extensible KV cache (0.34 →, on by default: `rules.extensible_kv_cache`) sizes the pool after warm-up and graph
capture from the memory then free (`measure_kv_cache_bytes`, `vllm/v1/worker/extensible_kv_cache.py:592-618`
(0.34.0); `finalize_extensible_kv_cache`, `vllm/v1/core/kv_cache_planning.py:1864-1906` (0.34.0)):

    used      = weights + non-torch growth + captured graph pool    (init free − free after warm-up − committed KV)
    reserve   = activation peak + [graph estimate]                  (`peak_activation_memory`, `gpu_worker.py:771-773`,
                                                                     kept free in full: `gpu_worker.py:946-948` (0.34.0))
    margin    = max(1 GiB (3 on ROCm), 0.75 × reserve)              (`extensible_kv_cache.py:64-65` (0.34.0))
    kv        = min(requested − used, init free − used − margin) − reserve, at most the profiled pool above
    concurrency = blocks / blocks_per_request; tokens = int(concurrency × max_model_len)

"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from vramctl.core import kv as kvmath
from vramctl.core import lora
from vramctl.core.engines import vllm_runtime as RT
from vramctl.core.engines import vllm_speculative as SP
from vramctl.core.engines.vllm import estimates as est
from vramctl.core.engines.vllm import messages as M
from vramctl.core.engines.vllm import rules as V
from vramctl.core.engines.vllm.defaults import VllmSettings
from vramctl.core.engines.vllm.kv_manager import (
    _largest_fitting_len,
    _request_kv_bytes,
    _stage_bytes_per_block,
    blocks_per_request_of,
    kv_view_of_model,
    lora_slots_of,
    own_cache_of,
)
from vramctl.core.engines.vllm.multimodal import MM_ENCODER_REL_BAND
from vramctl.core.errors import BadInputError
from vramctl.core.params import rank_weight_bytes
from vramctl.core.specs import DerivedCheckpoint, GpuSpec, ModelSpec, dtype_bytes
from vramctl.core.units import GiB, vllm_format_gib
from vramctl.core.verdicts import (
    FITS,
    GPU_UTIL_EXCEEDS_FREE,
    KV_POOL_OVERCOMMIT,
    KV_TOO_SMALL,
    NO_KV_CACHE_MEMORY,
    WEIGHTS_DO_NOT_FIT,
    Verdict,
)
from vramctl.core.weights import (
    LoadTimeChange,
    derived_weight_band,
    fp8_marlin_load_change,
    indexer_topk_buffer_bytes,
    mxfp4_load_change,
    rope_cache_bytes,
    stage_rank_weight_bytes,
)


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
    held_back: int = 0
    """The extensible KV cache (0.34 →): what its sizing keeps free beyond the terms (the margin, the graph estimate
    in the reserve, requested − init free); 0 otherwise."""
    reserved_blocks: int = 0
    """The extensible KV cache (0.34 →): the capacity the profile estimate reserved, in blocks; the runner is built,
    and its graphs checked, against it before the pool shrinks to `num_blocks`; 0 otherwise."""


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
    init_free: int | None = None,
    rocm: bool = False,
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
        sampler=s.sampler,
        cal=cal,
    )
    mm = s.mm_encoder
    if mm is not None and mm.profiled:
        activation = est.with_mm_encoder(
            activation,
            forward_bytes=mm.forward_bytes,
            outputs_bytes=mm.outputs_bytes,
            formula=mm.formula,
            rel_band=MM_ENCODER_REL_BAND,
        )
    charges_nccl = V.charges_nccl_to_budget(s.version)
    rules = V.rules_for(s.version)
    pre_charge: est.PreSnapshotCharge = (
        ("process" if rules.v0_charges_process else "none") if v0 else rules.v1_pre_profile_charge
    )
    non_torch = est.non_torch_charged(
        version_kind=sem_kind,
        tp=tp * pp,
        charges_nccl=charges_nccl,
        peer_to_peer=s.peer_to_peer,
        pre_snapshot_charge=pre_charge,
        cal=cal,
    )
    outside = est.pre_snapshot_overhead(tp=tp * pp, v0=charges_nccl, pre_snapshot_charge=pre_charge, cal=cal)
    graph = est.graph_pool(
        model,
        capture_sizes=s.cudagraph_capture_sizes,
        layers_on_rank=layers,
        regime=V.graph_regime_for(s.version, s.cudagraph_mode),
        tp=tp,
        custom_all_reduce=s.custom_all_reduce,
        lora_twice=s.enable_lora and RT.graphs_specialize_lora(s.version, v0_engine=v0),
        cal=cal,
        none_reason="cudagraph_mode NONE" if s.cudagraph_mode == "NONE" else "enforce eager",
    )
    if s.speculative is not None and stage == pp - 1:
        # the drafter's forward, the rejection sampler's warm-up and the drafter's graphs (vllm_speculative)
        charges = speculative_charges(model, s, cal)
        activation = SP.with_activation(activation, charges, cal)
        graph = SP.with_graphs(graph, charges, cal)
    if edge:
        activation, non_torch, outside, graph = (
            _at_edge(e, edge) for e in (activation, non_torch, outside, graph)
        )
    graph_charged = graph.bytes if (s.estimate_cudagraphs and s.cudagraph_capture_sizes) else 0
    held_back = reserved = 0
    if s.kv_cache_memory_bytes is not None:
        kv_bytes = s.kv_cache_memory_bytes
    else:
        kv_bytes = requested - weights - activation.bytes - non_torch.bytes - graph_charged - others_charged
        if s.extensible_kv_cache and init_free is not None:
            reserved = kv_bytes
            kv_bytes, held_back = _extensible_kv(
                kv_bytes,
                requested,
                init_free - outside.bytes,
                weights,
                activation,
                non_torch,
                graph,
                graph_charged,
                rocm=rocm,
            )
            graph_charged = graph.bytes
    bpb = _stage_bytes_per_block(kv_model, s, stage)
    blocks = max(0, kv_bytes // bpb) if kv_bytes > 0 else 0
    reserved_blocks = max(0, reserved // bpb)
    return _Stage(
        stage,
        weights,
        activation,
        non_torch,
        outside,
        graph,
        graph_charged,
        kv_bytes,
        bpb,
        blocks,
        held_back,
        reserved_blocks,
    )


def speculative_charges(
    model: ModelSpec, s: VllmSettings, cal: est.Calibration, capture_sizes_without: int | None = None
) -> SP.ProfileCharges:
    """`vllm_speculative.profile_charges` for these settings (speculative decoding on)."""
    assert s.speculative is not None
    return SP.profile_charges(
        model,
        s.speculative,
        version=s.version,
        max_num_batched_tokens=s.max_num_batched_tokens,
        max_num_seqs=s.max_num_seqs,
        tp=s.tensor_parallel_size,
        act_bytes=min(dtype_bytes(s.dtype) if s.dtype else 2, 2),
        capture_sizes=s.cudagraph_capture_sizes,
        cudagraph_mode=s.cudagraph_mode,
        regime=V.graph_regime_for(s.version, s.cudagraph_mode),
        custom_all_reduce=s.custom_all_reduce,
        capture_sizes_without=capture_sizes_without,
        cal=cal,
    )


EXTENSIBLE_MARGIN_FLOOR_BYTES = 1 * GiB
"""`KV_CACHE_MARGIN_FLOOR_BYTES` on CUDA (`vllm/v1/worker/extensible_kv_cache.py:64` (0.34.0); 3 GiB on ROCm)."""
EXTENSIBLE_MARGIN_FLOOR_ROCM_BYTES = 3 * GiB
EXTENSIBLE_MARGIN_FRACTION = 0.75
"""`KV_CACHE_MARGIN_FRACTION` (`extensible_kv_cache.py:65` (0.34.0))."""


def extensible_kv_bytes(requested: int, init_free: int, used: int, reserve: int, *, rocm: bool = False) -> int:
    """`measure_kv_cache_bytes` (`vllm/v1/worker/extensible_kv_cache.py:592-618` (0.34.0)): `used` what stays
    allocated after warm-up and capture, `reserve` the transient kept free (the larger of the recorded peak and torch's
    reservation growth); the margin is max(1 GiB (3 on ROCm), 0.75 × reserve). May be negative (no KV)."""
    floor = EXTENSIBLE_MARGIN_FLOOR_ROCM_BYTES if rocm else EXTENSIBLE_MARGIN_FLOOR_BYTES
    margin = max(floor, int(reserve * EXTENSIBLE_MARGIN_FRACTION))
    return min(requested - used, init_free - used - margin) - reserve


def _extensible_kv(
    profiled: int,
    requested: int,
    init_free: int,
    weights: int,
    activation: est.Estimate,
    non_torch: est.Estimate,
    graph: est.Estimate,
    graph_estimate: int,
    *,
    rocm: bool = False,
) -> tuple[int, int]:
    """(KV bytes, held back) of the extensible KV cache: `measure_kv_cache_bytes` (`extensible_kv_cache.py:592-618`
    (0.34.0)) with the measured terms replaced by their estimates. What warm-up and capture leave allocated (weights,
    non-torch growth, the captured graph pool) is `used`; the transient kept free is the profiled activation peak
    plus the graph estimate (`peak_activation_memory`, the reserve warm-up starts from, `gpu_worker.py:946-948`
    (0.34.0)) — the warm-up's own peak and torch's reservation growth are taken as no larger. The pool never exceeds
    the reserved capacity the profile sized (`finalize_extensible_kv_cache`, `kv_cache_planning.py:1883-1884`
    (0.34.0))."""
    used = weights + non_torch.bytes + graph.bytes
    reserve = activation.bytes + graph_estimate
    kv = min(extensible_kv_bytes(requested, init_free, used, reserve, rocm=rocm), profiled)
    held_back = requested - kv - weights - activation.bytes - non_torch.bytes - graph.bytes
    return kv, held_back


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
    indexer_buffer_bytes: int = 0
    """DeepSeek-V3.2's top-k indices buffer on every rank, booked with the weights (`indexer_topk_buffer_bytes`)."""
    derived: DerivedCheckpoint | None = None
    """The model's `DerivedCheckpoint` when its weights are derived from its name (a band around them)."""
    weight_band: float = 0.0
    """Half-width of that band as a fraction of the weights (`derived_weight_band`)."""


def _weights_per_stage(
    model: ModelSpec, gpu: GpuSpec, s: VllmSettings
) -> tuple[tuple[int, ...], LoadTimeChange | None, int, lora.LoraSlots | None]:
    """Each stage's weight bytes on one rank, with what loading adds: MXFP4 load-time changes, the rotary caches
    (and DeepSeek-V3.2's indexer top-k buffer), and the `--enable-lora` slots (allocated while the model loads: part of vLLM's "Model loading took")."""
    tp, pp = s.tensor_parallel_size, s.pipeline_parallel_size
    load_change = mxfp4_load_change(
        model,
        tp=tp,
        ep=s.expert_parallel_size,
        compute_capability=gpu.compute_capability,
        vendor=gpu.vendor,
        lora=s.enable_lora,
        marlin_on_hopper=V.rules_for(s.version).mxfp4_marlin_on_hopper,
        marlin_below_hopper=V.rules_for(s.version).mxfp4_marlin_below_hopper,
    ) or fp8_marlin_load_change(model, tp=tp, compute_capability=gpu.compute_capability, vendor=gpu.vendor)
    rope = rope_cache_bytes(model, s.dtype)
    topk = indexer_topk_buffer_bytes(model, s.max_num_batched_tokens)
    loaded = model
    if s.mm_encoder is not None and not s.mm_encoder.tower_loaded and model.vision_params:
        # every modality's limit is 0: vLLM builds no tower (`VllmRules.skips_unused_tower`)
        tower = rank_weight_bytes(model, 1).vision
        loaded = replace(model, vision_params=0, weight_bytes=max(0, model.weight_bytes - tower))
    weights = tuple(
        w + rope + topk
        for w in stage_rank_weight_bytes(
            loaded, tp=tp, pp=pp, dtype=s.dtype, ep=s.expert_parallel_size, load_change=load_change
        )
    )
    if s.speculative is not None:
        # the MTP layers / the draft model load on the last stage (vramctl.core.engines.vllm_speculative)
        drafter = SP.drafter_rank_bytes(model, s.speculative, dtype=s.dtype, tp=tp, ep=s.expert_parallel_size, pp=pp)
        weights = (*weights[:-1], weights[-1] + drafter)
    if s.weights_outside_budget:  # mapped from a weight-cache daemon (vramctl.core.engines.vllm_external_weights)
        weights = tuple(0 for _ in weights)
    slots = lora_slots_of(model, s)
    if slots is not None and lora_slots_charged(s):
        weights = tuple(w + extra for w, extra in zip(weights, slots.stage_bytes, strict=True))
    return weights, load_change, rope, slots


def lora_slots_charged(s: VllmSettings) -> bool:
    """Whether the LoRA slots are booked with the weights (`vllm_runtime.lora_slots_charged`)."""
    return RT.lora_slots_charged(s.release or s.version, v0_engine=V.is_v0(s.version))


def _uncharged_lora_slots(stages: tuple[_Stage, ...], slots: lora.LoraSlots) -> tuple[_Stage, ...]:
    """V0 before the fix of vllm#14450 allocated the slots after its weights profiler: outside the budget."""
    return tuple(
        replace(
            st,
            outside=replace(
                st.outside,
                bytes=st.outside.bytes + slots.stage_bytes[st.index],
                formula=st.outside.formula
                + f" + LoRA slots {slots.stage_bytes[st.index] / GiB:.2f} GiB (V0 allocates them after its "
                "weights profiler and does not charge them)",
                parts=(*st.outside.parts, ("lora_slots", slots.stage_bytes[st.index])),
            ),
        )
        for st in stages
    )


@dataclass(frozen=True)
class _Pool:
    """What the verdict checks read: the binding stage's pool and one request's need."""

    s: VllmSettings
    rules: V.VllmRules
    capacity: int
    requested: int
    other: int
    others_charged: int
    weights: tuple[int, ...]
    stages: tuple[_Stage, ...]
    binding: _Stage
    num_blocks: int
    available: int
    needed: int
    fit_len: int
    has_state: bool = False
    """The model has Mamba / linear-attention state layers (`kv_cache_config.has_mamba_layers`)."""


def _verdict(p: _Pool) -> tuple[Verdict, str]:
    """The checks, in the order vLLM meets them: `fits` with no message, or the first failure and its message."""
    s, rules = p.s, p.rules
    snapshot_free = None if s.free_memory_bytes is None else s.free_memory_bytes - p.binding.outside.bytes
    profiled = s.kv_cache_memory_bytes is None
    # the extensible KV cache (0.34 →) skips the free-memory check: the budget is only a cap
    # (`vllm/v1/worker/utils.py:783-797` (0.34.0))
    if snapshot_free is not None and profiled and not s.extensible_kv_cache and snapshot_free < p.requested:
        if not rules.checks_free_memory and not p.others_charged:
            return GPU_UTIL_EXCEEDS_FREE, M.no_free_memory_check(s.version, p.requested, snapshot_free)
        if rules.checks_free_memory:
            return GPU_UTIL_EXCEEDS_FREE, M.free_memory_error(
                device="cuda:0",
                free=vllm_format_gib(max(0, snapshot_free)),
                total=vllm_format_gib(p.capacity),
                util=s.gpu_memory_utilization,
                requested=vllm_format_gib(p.requested),
                version=s.version,
            )
    limit = p.requested if profiled else p.capacity - p.other
    budget_binds = profiled
    if profiled and s.extensible_kv_cache:
        # no free-memory check bounds the request (0.34 →): the weights must fit in what is free at start
        free = p.capacity - p.other - p.binding.outside.bytes
        limit, budget_binds = min(limit, free), p.requested <= free
    if max(p.weights) > limit:
        return WEIGHTS_DO_NOT_FIT, M.weights_do_not_fit(max(p.weights), limit, profiled=budget_binds)
    if s.kv_cache_memory_bytes is not None:
        # Certain, not an estimate: the weights, the given pool and the CUDA context alone exceed the card.
        over = max(st.weights + st.kv_bytes + st.outside.bytes for st in p.stages) - (p.capacity - p.other)
        if over > 0:
            return KV_POOL_OVERCOMMIT, M.kv_pool_overcommit(
                s.kv_cache_memory_bytes, max(p.weights), p.capacity - p.other, over
            )
    # 0.34's hint by sizing mode; the extensible pool is checked again after warm-up (`shrink_kv_cache_configs`,
    # `vllm/v1/core/kv_cache_planning.py:1827-1862` (0.34.0))
    hint = M.kv_memory_hint(
        extensible=s.extensible_kv_cache,
        utilization=s.gpu_memory_utilization,
        after_warmup=s.extensible_kv_cache,
    )
    if p.available <= 0 or p.num_blocks <= 0:
        return NO_KV_CACHE_MEMORY, M.no_cache_memory_error(s.version, hint)
    if rules.v0 and p.num_blocks * s.block_size < s.max_model_len:
        return KV_TOO_SMALL, M.v0_kv_too_small(s.max_model_len, p.num_blocks * s.block_size)
    if not rules.v0 and p.needed > p.available:
        return KV_TOO_SMALL, M.one_request_error(
            max_model_len=s.max_model_len,
            needed=M.gib_text(p.needed, s.version),
            available=M.gib_text(p.available, s.version),
            estimated=p.fit_len,
            version=s.version,
            hint=hint,
        )
    if (
        p.has_state
        and rules.mamba_seqs_within_blocks
        and not s.enforce_eager
        and V.graph_regime_for(s.version, s.cudagraph_mode) == "full-and-piecewise"
        and s.max_num_seqs > _graph_check_blocks(p)
    ):
        # the pool is too small for the flags: one Mamba block per decode sequence under full CUDA graphs
        return KV_TOO_SMALL, M.mamba_blocks_error(s.max_num_seqs, _graph_check_blocks(p))
    return FITS, ""


def _graph_check_blocks(p: _Pool) -> int:
    """The blocks `resolve_cudagraph_mode_and_sizes` checks max_num_seqs against (`vllm/config/compilation.py:1659-1681`
    (0.34.0)): the pool; with the extensible KV cache the reserved capacity, since the runner captures before the
    pool is sized (`initialize_kv_cache`, `vllm/v1/worker/gpu/model_runner.py:644-800` (0.34.0))."""
    return p.binding.reserved_blocks if p.s.extensible_kv_cache else p.num_blocks


def _core(
    model: ModelSpec,
    gpu: GpuSpec,
    s: VllmSettings,
    capacity: int,
    cal: est.Calibration = est.CALIBRATION,
    edge: int = 0,
) -> _Core:
    rules = V.rules_for(s.version)
    version = rules.version_tuple
    requested = math.ceil(capacity * s.gpu_memory_utilization)
    kv_model = kv_view_of_model(model, s.version, s.drafter_kv_layers)
    pp = s.pipeline_parallel_size
    weights, load_change, rope, slots = _weights_per_stage(model, gpu, s)
    band = derived_weight_band(model)
    if edge and band:  # a checkpoint derived from its name (vramctl.registry.derived): the weights are an estimate
        weights = tuple(w + edge * round(w * band) for w in weights)
    parts = kvmath.pp_partition(model.num_hidden_layers, pp)
    other = capacity - s.free_memory_bytes if s.free_memory_bytes is not None else 0
    others_charged = other if rules.counts_other_processes else 0
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
            init_free=capacity - other,
            rocm=gpu.vendor == "amd",
        )
        for i in range(pp)
    )
    if slots is not None and not lora_slots_charged(s):
        stages = _uncharged_lora_slots(stages, slots)
    binding = min(stages, key=lambda st: (st.num_blocks, st.kv_bytes - st.bytes_per_block))
    num_blocks = binding.num_blocks
    bpr = blocks_per_request_of(kv_model, s, version)
    own = own_cache_of(kv_model, s)  # DeepSeek-V4's packed groups / Gemma-4's unified groups: vLLM's kv_cache_groups
    groups = (
        len(own.groups)
        if own is not None
        else max(1, len(kvmath.stage_layout(kvmath.stage_layer_kinds(kv_model, pp)[binding.index]).groups))
    )
    concurrency = num_blocks / bpr if bpr else 0.0
    if rules.tokens_from_concurrency:
        kv_tokens = int(concurrency * s.max_model_len)
    else:
        kv_tokens = num_blocks // groups * s.block_size
    available = binding.kv_bytes - (binding.bytes_per_block if rules.reserves_null_block else 0)
    pool = _Pool(
        s=s,
        rules=rules,
        capacity=capacity,
        requested=requested,
        other=other,
        others_charged=others_charged,
        weights=weights,
        stages=stages,
        binding=binding,
        num_blocks=num_blocks,
        available=available,
        needed=_request_kv_bytes(kv_model, s, s.max_model_len, version),
        fit_len=_largest_fitting_len(kv_model, s, available, model.vllm_max_model_len, version),
        has_state=model.state_space is not None,
    )
    verdict, message = _verdict(pool)
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
        max_model_len_fit=pool.fit_len,
        other_processes=other,
        non_kv_bytes=binding.weights
        + binding.activation.bytes
        + binding.non_torch.bytes
        + binding.graph_charged
        + binding.held_back,
        lora=slots,
        load_change=load_change,
        rope_bytes=rope,
        indexer_buffer_bytes=indexer_topk_buffer_bytes(model, s.max_num_batched_tokens),
        derived=model.derived,
        weight_band=band,
    )


def _auto_fit(
    model: ModelSpec, gpu: GpuSpec, core: _Core, capacity: int, cal: est.Calibration, edge: int = 0
) -> tuple[_Core, str | None]:
    """`--max-model-len auto` / `-1` (PR #29431, 0.12 →): the full context if it fits, else the largest length
    that does (`kv_cache_planning.py:1337-1410`), with vLLM's log line or its error."""
    s = core.s
    if not V.rules_for(s.version).has_auto_fit:
        raise BadInputError(
            f"--max-model-len auto: vLLM {s.version} has no auto-fit (added in 0.12, PR #29431)"
        )
    available = core.binding.kv_bytes - core.binding.bytes_per_block
    where = f"{vllm_format_gib(max(0, available))} GiB GPU"
    if core.verdict in (GPU_UTIL_EXCEEDS_FREE, WEIGHTS_DO_NOT_FIT, NO_KV_CACHE_MEMORY, KV_POOL_OVERCOMMIT):
        return core, None
    # the extensible KV cache (0.34 →) fits the length again after graph capture and warm-up and logs that fit
    # (`_auto_fit_max_model_len(after_warmup=True)`, `vllm/v1/core/kv_cache_planning.py:1427-1514` (0.34.0))
    after_warmup = s.extensible_kv_cache
    if core.verdict == FITS:
        if after_warmup:
            return core, (
                f"Auto-fit max_model_len: using max_model_len={s.max_model_len}, which fits in the KV cache memory "
                f"left after CUDA graph capture and warmup ({where})."
            )
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
            + (
                "token. CUDA graph capture and warmup left no memory for the KV cache. Increase "
                "`gpu_memory_utilization`, reduce the memory CUDA graphs take (fewer or smaller capture sizes in the "
                "compilation config), or use more GPUs."
                if after_warmup
                else "token. Try increasing `gpu_memory_utilization`."
            ),
        )
        return failed, None
    fitted = _core(model, gpu, replace(s, max_model_len=fit), capacity, cal, edge)
    if after_warmup:
        left = f"{where} left for the KV cache after CUDA graph capture and warmup"
        if fit >= AUTO_FIT_SHORT_MAX_MODEL_LEN:
            return fitted, f"--max-model-len auto reduced max_model_len from {s.max_model_len} to {fit} ({left})."
        hint = (
            "Increase `gpu_memory_utilization` or set --max-model-len explicitly."
            if s.gpu_memory_utilization < 1.0
            else "Use more GPUs or set --max-model-len explicitly."
        )
        return fitted, (
            f"--max-model-len auto reduced max_model_len from {s.max_model_len} to {fit} ({left}). Requests longer "
            f"than {fit} tokens will be rejected. {hint}"
        )
    return fitted, (
        f"Auto-fit max_model_len: reduced from {s.max_model_len} to {fit} to fit in available KV cache memory "
        f"({where})"
    )


AUTO_FIT_SHORT_MAX_MODEL_LEN = 8192
"""vLLM 0.34 warns when auto-fit leaves fewer tokens (`vllm/v1/core/kv_cache_planning.py:59-61` (0.34.0))."""
