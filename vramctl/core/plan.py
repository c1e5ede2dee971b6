"""`plan`: the budget of `vllm serve MODEL --flags` (and SGLang's) on a card, before touching it.

vLLM's subtraction by version (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), vLLM's release notes (github.com/vllm-project/vllm/releases)), per rank of the binding pipeline stage:

    requested = ceil(total × u)                                   (`vllm/v1/worker/utils.py:716-772`)
    kv        = requested − weights − activation peak − non-torch growth − [graph estimate, ≥0.20]
    blocks    = kv // bytes_per_block, minimum over ranks          (`kv_cache_planning.py:681`, `:1580-1594`)
    concurrency = blocks / blocks_per_request; tokens = int(concurrency × max_model_len)

The activation peak, non-torch and graph terms are estimates (vramctl.core.estimates); the weights are the
checkpoint's bytes; the KV cache is the residual, or `--kv-cache-memory-bytes` exactly (which skips profiling and
ignores the utilisation, as vLLM does). The ledger is physical: it also shows what lives outside the budget (the
CUDA context, NCCL communicators, graphs before 0.20), so `slack` is the headroom left on the card.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from vramctl.core import estimates as est
from vramctl.core import kv as kvmath
from vramctl.core import lora
from vramctl.core.engines import vllm as V
from vramctl.core.engines import vllm_features as vf
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
from vramctl.core.settings import LATEST_VLLM_VERSION, ServeSettings, parse_version
from vramctl.core.specs import FULL_ATTENTION, GpuSpec, ModelSpec, dtype_bytes
from vramctl.core.units import GiB, MiB, cdiv, vllm_format_gib
from vramctl.core.utilization import UtilizationRow, utilization_trade
from vramctl.core.weights import LoadTimeChange, mxfp4_load_change, rope_cache_bytes, stage_rank_weight_bytes

# Verdict labels (the cause labels of docs/explain-oom.md); `fits` when the engine would start.
FITS = "fits"
NO_KV_CACHE_MEMORY = "no-kv-cache-memory"
KV_TOO_SMALL = "kv-cache-too-small-for-max-model-len"
GPU_UTIL_EXCEEDS_FREE = "gpu-util-exceeds-free-memory"
WEIGHTS_DO_NOT_FIT = "weights-do-not-fit"
KV_POOL_OVERCOMMIT = "kv-pool-overcommit"
"""`--kv-cache-memory-bytes` larger than the card holds beside the weights: vLLM skips profiling and fails
allocating the pool it was told to size (explain-oom: an OOM at KV allocation, phase kv-alloc)."""
HOST_PINNED_MEMORY_FAILURE = "host-pinned-memory-failure"
"""The host tier's pinned pool does not fit the host's RAM: SGLang refuses to start ("Not enough host memory
available…"), vLLM's pinned allocation fails (the cause labels of docs/explain-oom.md, host tier)."""

VALID_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
"""`CacheConfig.block_size` accepts these (vllm/config/cache.py, BlockSize)."""
_ABSURD_TOKENS = 1 << 26
AUTO_MAX_MODEL_LEN = -1
"""`--max-model-len auto` (or -1): vLLM fits the length to the KV pool (0.12 →)."""
_THIN_MARGIN_BYTES = 1 * GiB


# --- resolved settings ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmSettings:
    """ServeSettings with every vLLM default filled in for one version and card."""

    version: str
    gpu_memory_utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    kv_cache_dtype: str
    dtype: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    enforce_eager: bool
    estimate_cudagraphs: bool
    cudagraph_capture_sizes: tuple[int, ...]
    kv_cache_memory_bytes: int | None
    free_memory_bytes: int | None
    entrypoint: str
    defaults_used: tuple[str, ...]
    """Names of the fields that took the engine's default."""
    data_parallel_size: int = 1
    expert_parallel_size: int = 1
    """Ranks the routed experts are spread over: TP × DP with --enable-expert-parallel on an MoE model, else 1."""
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    fully_sharded_loras: bool = False
    max_num_active_seqs: int | None = None
    """vLLM 0.31 →: requests admitted into RUNNING; None = max_num_seqs (the flag not given)."""
    async_scheduling: bool = True
    """Off with `--no-async-scheduling`: one batch in flight per stage (sliding-window blocks per request)."""
    weights_outside_budget: bool = False
    """Weights mapped from a weight-cache daemon and not charged (vramctl.core.engines.vllm_external_weights)."""

    def to_json(self) -> dict[str, Any]:
        out = {
            "engine_version": self.version,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "block_size": self.block_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "dtype": self.dtype,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "enforce_eager": self.enforce_eager,
            "estimate_cudagraphs": self.estimate_cudagraphs,
            "cudagraph_capture_sizes": list(self.cudagraph_capture_sizes),
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "free_memory_bytes": self.free_memory_bytes,
            "entrypoint": self.entrypoint,
            "defaults_used": list(self.defaults_used),
            "data_parallel_size": self.data_parallel_size,
            "expert_parallel_size": self.expert_parallel_size,
            "enable_lora": self.enable_lora,
            "max_loras": self.max_loras if self.enable_lora else None,
            "max_lora_rank": self.max_lora_rank if self.enable_lora else None,
            "async_scheduling": self.async_scheduling,
        }
        if self.max_num_active_seqs is not None:  # only when given: other plans' JSON is unchanged
            out["max_num_active_seqs"] = self.max_num_active_seqs
        return out


@dataclass(frozen=True)
class PlanEdge:
    """The plan with every estimated term at one edge of its ± band (the activation peak, non-torch memory and
    the CUDA-graph pool all at their 90th-percentile error): the KV pool, blocks, tokens, concurrency, the largest
    fitting length and the verdict there. The weights are derived from the checkpoint and do not move."""

    kv_cache_bytes: int
    num_blocks: int
    kv_tokens: int
    max_concurrency: float
    max_model_len_fit: int
    verdict: str
    verdict_message: str

    @property
    def fits(self) -> bool:
        return self.verdict == FITS

    def to_json(self) -> dict[str, Any]:
        return {
            "kv_cache_bytes": self.kv_cache_bytes,
            "num_blocks": self.num_blocks,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_model_len_fit": self.max_model_len_fit,
            "verdict": self.verdict,
            "verdict_message": self.verdict_message,
        }


@dataclass(frozen=True)
class PlanResult:
    engine: str
    engine_version: str
    model: ModelSpec
    gpu: GpuSpec
    settings: VllmSettings
    ledger: Ledger
    capacity_bytes: int
    requested_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int
    bytes_per_block: int
    block_size: int
    num_blocks: int
    blocks_per_request: int
    kv_tokens: int
    max_concurrency: float
    max_model_len: int
    max_model_len_fit: int
    verdict: str
    verdict_message: str
    outside_budget_bytes: int
    """Memory the process holds that vLLM does not charge to `requested` (CUDA context, NCCL, graphs < 0.20)."""
    binding_stage: int
    utilization_table: tuple[UtilizationRow, ...] = ()
    sglang: Any = None
    """The SGLang engineer's SglangPlan for `--engine sglang|both` (None otherwise)."""
    gap: tuple[Any, ...] = ()
    host_tier: Any = None
    warnings: tuple[str, ...] = ()
    explanations: tuple[str, ...] = ()
    hybrid: Any = None
    """A HybridPlan for Mamba / linear-attention hybrids (the state term, docs/hybrid.md); None otherwise."""
    kv_cache_uncertainty_bytes: int = 0
    """How much the KV pool shrinks at the pessimistic edge (the estimated terms' bands, summed)."""
    pessimistic: PlanEdge | None = None
    """The plan with every estimated term at the top of its band; None where the plan has no such band."""
    optimistic: PlanEdge | None = None
    engine_features: Any = None
    """vramctl.core.engines.vllm_features.EngineFeatures when ipc_cache / sleep / yarn / the suggestion apply."""
    fixes: tuple[Any, ...] = ()
    """For a plan that does not fit, or fits only if the estimates hold: the smallest single changes that make
    it fit at the pessimistic edge, each checked by planning it (vramctl.core.fixes.Fix)."""

    @property
    def fits(self) -> bool:
        return self.verdict == FITS

    @property
    def at_risk(self) -> bool:
        """Fits with the estimates, not at the pessimistic edge: the server may not start."""
        return self.verdict == FITS and self.pessimistic is not None and not self.pessimistic.fits

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": self.engine,
            "engine_version": self.engine_version,
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
                "name": self.gpu.name,
                "display_name": self.gpu.display_name,
                "total_bytes": self.capacity_bytes,
            },
            "settings": self.settings.to_json(),
            "terms": self.ledger.to_json(),
            "capacity_bytes": self.capacity_bytes,
            "requested_bytes": self.requested_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "bytes_per_block": self.bytes_per_block,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "blocks_per_request": self.blocks_per_request,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_model_len": self.max_model_len,
            "max_model_len_fit": self.max_model_len_fit,
            "verdict": self.verdict,
            "verdict_message": self.verdict_message,
            "outside_budget_bytes": self.outside_budget_bytes,
            "binding_stage": self.binding_stage,
            "utilization_table": [row.to_json() for row in self.utilization_table],
            "sglang": _to_json_or_none(self.sglang),
            "gap": [_to_json_or_none(item) for item in self.gap],
            "host_tier": _to_json_or_none(self.host_tier),
            "warnings": list(self.warnings),
            "explanations": list(self.explanations),
        }
        out["at_risk"] = self.at_risk
        out["kv_cache_uncertainty_bytes"] = self.kv_cache_uncertainty_bytes
        out["pessimistic"] = None if self.pessimistic is None else self.pessimistic.to_json()
        out["optimistic"] = None if self.optimistic is None else self.optimistic.to_json()
        out["fixes"] = [fix.to_json() for fix in self.fixes]
        if self.hybrid is not None:  # only hybrids carry the key: other plans' JSON is unchanged
            out["hybrid"] = self.hybrid.to_json()
        if self.engine_features is not None:  # likewise (vramctl.core.engines.vllm_features)
            out["engine_features"] = self.engine_features.to_json()
        return out


def _to_json_or_none(obj: Any) -> Any:
    if obj is None:
        return None
    to_json = getattr(obj, "to_json", None)
    return to_json() if callable(to_json) else obj


# --- validation and defaults ------------------------------------------------------------------------------------


def _check_positive(value: int | float | None, flag: str, *, upper: float | None = None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadInputError(f"{flag} {value!r}: not a number")
    if value <= 0:
        raise BadInputError(f"{flag} {value}: must be positive")
    if upper is not None and value > upper:
        raise BadInputError(f"{flag} {value}: absurdly large (at most {upper:,.0f})")


def validate(model: ModelSpec, gpu: GpuSpec, settings: ServeSettings) -> None:
    """Reject what vLLM itself would reject, and nonsense, naming the flag (exit 2)."""
    u = settings.gpu_memory_utilization
    if u is not None and (not math.isfinite(u) or u <= 0 or u > 1):
        raise BadInputError(
            f"--gpu-memory-utilization {u}: must be in (0, 1] (vllm/config/cache.py: gt=0, le=1)"
        )
    _check_positive(settings.tensor_parallel_size, "--tensor-parallel-size", upper=4096)
    _check_positive(settings.pipeline_parallel_size, "--pipeline-parallel-size", upper=1024)
    _check_positive(settings.data_parallel_size, "--data-parallel-size", upper=4096)
    if settings.max_model_len != AUTO_MAX_MODEL_LEN:
        _check_positive(settings.max_model_len, "--max-model-len", upper=_ABSURD_TOKENS)
    _check_positive(settings.max_num_batched_tokens, "--max-num-batched-tokens", upper=_ABSURD_TOKENS)
    _check_positive(settings.max_num_seqs, "--max-num-seqs", upper=1 << 20)
    _check_positive(settings.max_num_active_seqs, "--max-num-active-seqs", upper=1 << 20)
    _check_positive(settings.kv_cache_memory_bytes, "--kv-cache-memory-bytes", upper=float(1 << 50))
    _check_positive(settings.gpu_memory_bytes, "--gpu-memory", upper=float(1 << 44))
    if settings.free_memory_bytes is not None and settings.free_memory_bytes < 0:
        raise BadInputError(f"--free-memory {settings.free_memory_bytes}: must not be negative")
    capacity = settings.gpu_memory_bytes or gpu.cuda_total_bytes
    if settings.free_memory_bytes is not None and settings.free_memory_bytes > capacity:
        raise BadInputError(
            f"--free-memory {settings.free_memory_bytes / GiB:.2f} GiB: more than the card's total "
            f"{capacity / GiB:.2f} GiB"
        )
    if settings.block_size is not None and settings.block_size not in VALID_BLOCK_SIZES:
        raise BadInputError(
            f"--block-size {settings.block_size}: vLLM accepts {', '.join(str(b) for b in VALID_BLOCK_SIZES)}"
        )
    kvmath.check_tensor_parallel(model, settings.tensor_parallel_size)
    if settings.pipeline_parallel_size > model.num_hidden_layers:
        raise BadInputError(
            f"--pipeline-parallel-size {settings.pipeline_parallel_size}: more stages than the model's "
            f"{model.num_hidden_layers} layers"
        )
    mml = settings.max_model_len
    if (
        mml is not None
        and mml != AUTO_MAX_MODEL_LEN
        and mml > model.vllm_max_model_len
        and not settings.allow_long_max_model_len
    ):
        raise BadInputError(
            f"--max-model-len {mml}: User-specified max_model_len ({mml}) is greater than the derived max_model_len "
            f"(max_position_embeddings={model.vllm_max_model_len} in model's config.json); vLLM refuses it unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (or --hf-overrides raises the derived length: a rope scaling, or for yarn from "
            "vLLM 0.30 max_position_embeddings itself)"
        )
    if settings.kv_cache_dtype:
        kvmath.kv_dtype_bytes(model, settings.kv_cache_dtype, model_dtype=settings.dtype)
    if settings.dtype not in ("auto", ""):
        try:
            dtype_bytes(settings.dtype)
        except KeyError:
            raise BadInputError(
                f"--dtype {settings.dtype!r}: unknown dtype (use auto, bfloat16, float16, float32)"
            ) from None


def _compute_dtype(model: ModelSpec, dtype: str) -> str:
    """vLLM `--dtype auto`: the checkpoint's dtype, but fp16 for a float32 checkpoint (vllm/config/model.py)."""
    if dtype not in ("auto", ""):
        return dtype
    try:
        size = dtype_bytes(model.torch_dtype)
    except KeyError:
        return "bfloat16"
    return "float16" if size > 2 else model.torch_dtype


def default_block_size_for(model: ModelSpec, gpu: GpuSpec, version: str) -> int:
    """16, except MLA on FlashMLA (Hopper, 64) and CUTLASS MLA (data-center Blackwell, 128) (`vllm/config/cache.py` (vLLM v0.33.0))."""
    if model.is_mla and not V.is_v0(version) and gpu.compute_capability:
        major = gpu.compute_capability.split(".")[0]
        if major == "9":
            return 64
        if major == "10":
            return 128
    return V.default_block_size(version)


def resolve_settings(model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, version: str) -> VllmSettings:
    defaults: list[str] = []
    u = settings.gpu_memory_utilization
    if u is None:
        u = V.default_gpu_memory_utilization(version)
        defaults.append("gpu_memory_utilization")
    mml = settings.max_model_len
    if mml is None or mml == AUTO_MAX_MODEL_LEN:
        mml = model.vllm_max_model_len
        defaults.append("max_model_len")
    table_tokens, table_seqs = V.default_scheduler_limits(
        gpu,
        version,
        settings.entrypoint,
        settings.world_size,
        max_model_len=mml,
        enable_chunked_prefill=settings.enable_chunked_prefill,
        enable_lora=settings.enable_lora,
        sliding_window=bool(model.num_sliding_layers),
    )
    tokens = settings.max_num_batched_tokens
    seqs = settings.max_num_seqs
    if tokens is None:
        defaults.append("max_num_batched_tokens")
    if seqs is None:
        defaults.append("max_num_seqs")
    chunked = settings.enable_chunked_prefill if settings.enable_chunked_prefill is not None else True
    if V.is_v0(version):
        # `use_long_context = max_model_len > 32768`, not with LoRA or a sliding window (_set_default_args_v0)
        long_context = mml > 32768 and not settings.enable_lora and not model.num_sliding_layers
        chunked = (
            settings.enable_chunked_prefill if settings.enable_chunked_prefill is not None else long_context
        )
    tokens, seqs = V.apply_scheduler_caps(
        tokens if tokens is not None else table_tokens,
        seqs if seqs is not None else table_seqs,
        mml,
        user_batched_tokens=settings.max_num_batched_tokens is not None,
        chunked_prefill=chunked,
    )
    block = settings.block_size
    if block is None:
        block = default_block_size_for(model, gpu, version)
        defaults.append("block_size")
    if model.state_space is not None:
        block = _hybrid_kv(model, gpu, settings, version).block_size
    estimate_cg = settings.estimate_cudagraphs
    if estimate_cg is None:
        estimate_cg = V.estimate_cudagraphs_default(version)
        defaults.append("estimate_cudagraphs")
    elif estimate_cg and not V.supports_cudagraph_estimate(version):
        estimate_cg = False
    if settings.enforce_eager:
        sizes: tuple[int, ...] = ()
    elif settings.cudagraph_capture_sizes is not None:
        sizes = tuple(sorted({s for s in settings.cudagraph_capture_sizes if 0 < s <= tokens}))
    else:
        sizes = V.default_capture_sizes(
            seqs, tokens, gpu, version, max_capture_size=settings.max_cudagraph_capture_size
        )
    return VllmSettings(
        version=version,
        gpu_memory_utilization=float(u),
        max_model_len=mml,
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
        block_size=block,
        kv_cache_dtype=settings.kv_cache_dtype or "auto",
        dtype=_compute_dtype(model, settings.dtype),
        tensor_parallel_size=settings.tensor_parallel_size,
        pipeline_parallel_size=settings.pipeline_parallel_size,
        enforce_eager=settings.enforce_eager,
        estimate_cudagraphs=bool(estimate_cg),
        cudagraph_capture_sizes=sizes,
        kv_cache_memory_bytes=settings.kv_cache_memory_bytes,
        free_memory_bytes=settings.free_memory_bytes,
        entrypoint=settings.entrypoint,
        defaults_used=tuple(defaults),
        data_parallel_size=settings.data_parallel_size,
        # vLLM FusedMoEParallelConfig.make: with EP the expert group is the flattened TP × DP ranks
        expert_parallel_size=settings.tensor_parallel_size * settings.data_parallel_size
        if settings.enable_expert_parallel and model.moe is not None
        else 1,
        enable_lora=settings.enable_lora,
        max_loras=settings.max_loras if settings.max_loras is not None else lora.DEFAULT_MAX_LORAS,
        max_lora_rank=settings.max_lora_rank
        if settings.max_lora_rank is not None
        else lora.DEFAULT_MAX_LORA_RANK,
        fully_sharded_loras=settings.fully_sharded_loras,
        max_num_active_seqs=_active_seqs(settings, version, seqs),
        async_scheduling=settings.async_scheduling is not False,
    )


def _active_seqs(settings: ServeSettings, version: str, max_num_seqs: int) -> int | None:
    """`--max-num-active-seqs` (vLLM 0.31.0 →, `vllm/config/scheduler.py`): admission into RUNNING only; it must
    not exceed max_num_seqs (the same ValueError as vLLM's) and moves no memory term."""
    active = settings.max_num_active_seqs
    if active is None:
        return None
    if parse_version(version) < (0, 31, 0):
        raise BadInputError(
            f"--max-num-active-seqs {active}: vLLM {version} has no such flag (added in 0.31.0); vLLM would stop "
            "with 'unrecognized arguments'"
        )
    if active > max_num_seqs:
        raise BadInputError(
            f"--max-num-active-seqs {active}: max_num_active_seqs ({active}) cannot be greater than max_num_seqs "
            f"({max_num_seqs}). (vLLM's error; lower it or raise --max-num-seqs)"
        )
    return active


# --- the vLLM budget ---------------------------------------------------------------------------------------------


def kv_view_of_model(model: ModelSpec, version: str) -> ModelSpec:
    """The model as the version's KV manager sees it: V0, and V1 before the hybrid allocator (0.10), size
    sliding-window layers of a hybrid model as full attention (datapoint 119: "V0 sizes KV as if every layer were
    full attention"; `unify_hybrid_kv_cache_specs`)."""
    hybrid = model.num_sliding_layers and model.num_full_layers
    if model.num_sliding_layers and (V.is_v0(version) or (hybrid and parse_version(version) < (0, 10, 0))):
        return replace(model, layer_types=(FULL_ATTENTION,) * model.num_hidden_layers, sliding_window=None)
    return model


def lora_slots_of(model: ModelSpec, s: VllmSettings) -> lora.LoraSlots | None:
    """The LoRA buffers `--enable-lora` adds to each stage's weights (`vramctl.core.lora`); None without it."""
    if not s.enable_lora:
        return None
    return lora.lora_slots(
        model,
        tp=s.tensor_parallel_size,
        pp=s.pipeline_parallel_size,
        max_loras=s.max_loras,
        max_lora_rank=s.max_lora_rank,
        dtype_bytes=int(dtype_bytes(s.dtype)),
        fully_sharded=s.fully_sharded_loras,
        expert_parallel=s.expert_parallel_size > 1,
    )


def stage_weight_bytes(model: ModelSpec, *, tp: int, pp: int, dtype: str, ep: int = 1) -> tuple[int, ...]:
    """Weight bytes on one rank of each pipeline stage (`vramctl.core.weights.stage_rank_weight_bytes`).

    Exact per rank: what TP splits is divided, what every rank holds in full (norms, routers, MLA's q_a /
    kv_a, KV heads when TP exceeds them, the vocab padding to 64 rows) is not. The decoder layers split as
    `get_pp_indices` splits them; the embedding sits on the first stage and the lm_head on the last (a tied
    head is loaded on the last stage too when pp > 1). A `--dtype` other than the checkpoint's rescales an
    unquantised checkpoint. `ep` > 1: routed experts whole over ep ranks (--enable-expert-parallel).
    """
    return stage_rank_weight_bytes(model, tp=tp, pp=pp, dtype=dtype, ep=ep)


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


def _graph_regime(version: str) -> str:
    v = parse_version(version)
    if v < (0, 8, 0):
        return "v0"
    if v < (0, 12, 0):
        return "piecewise"
    return "full-and-piecewise"


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
        regime=_graph_regime(s.version),
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


def _stage_bytes_per_block(kv_model: ModelSpec, s: VllmSettings, stage: int) -> int:
    kinds = kvmath.stage_layer_kinds(kv_model, s.pipeline_parallel_size)[stage]
    page = kvmath.page_size_bytes(
        kv_model,
        block_size=s.block_size,
        kv_cache_dtype=s.kv_cache_dtype,
        tp=s.tensor_parallel_size,
        model_dtype=s.dtype,
    )
    return kvmath.stage_layout(kinds).group_size * page


def _largest_fitting_len(
    kv_model: ModelSpec, s: VllmSettings, available: int, upper: int, version: tuple[int, ...]
) -> int:
    """vLLM's `estimate_max_model_len`: binary search in [1, upper] for the largest length whose per-request
    KV fits `available` (`kv_cache_planning.py:97-148`); 0 when one token does not fit."""

    def needed(length: int) -> int:
        return kvmath.per_request_kv_bytes(
            kv_model,
            max_model_len=length,
            block_size=s.block_size,
            max_num_batched_tokens=s.max_num_batched_tokens,
            version=version,
            kv_cache_dtype=s.kv_cache_dtype,
            tp=s.tensor_parallel_size,
            pp=s.pipeline_parallel_size,
            model_dtype=s.dtype,
            async_scheduling=s.async_scheduling,
        )

    if available <= 0 or needed(1) > available:
        return 0
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if needed(mid) <= available:
            lo = mid
        else:
            hi = mid - 1
    return lo


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
    if s.weights_outside_budget:  # mapped from a weight-cache daemon (vramctl.core.engines.vllm_external_weights)
        weights = tuple(0 for _ in weights)
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
        message = V.free_memory_error(
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
        message = V.no_cache_memory_error(s.version)
    elif V.is_v0(s.version) and num_blocks * s.block_size < s.max_model_len:
        verdict = KV_TOO_SMALL
        message = (
            f"The model's max seq len ({s.max_model_len}) is larger than the maximum number of tokens that can be "
            f"stored in KV cache ({num_blocks * s.block_size}). Try increasing `gpu_memory_utilization` or "
            "decreasing `max_model_len` when initializing the engine."
        )
    elif not V.is_v0(s.version) and needed > available:
        verdict = KV_TOO_SMALL
        message = V.one_request_error(
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


def _edge_of(core: _Core) -> PlanEdge:
    return PlanEdge(
        kv_cache_bytes=core.binding.kv_bytes,
        num_blocks=core.num_blocks,
        kv_tokens=core.kv_tokens,
        max_concurrency=core.concurrency,
        max_model_len_fit=core.max_model_len_fit,
        verdict=core.verdict,
        verdict_message=core.verdict_message,
    )


def _ledger(core: _Core, kv_band: int = 0) -> Ledger:
    st = core.binding
    s = core.s
    terms: list[Term] = []
    if core.other_processes:
        terms.append(
            Term(
                OTHER_PROCESSES,
                core.other_processes,
                TermSource.GIVEN,
                "total − --free-memory",
                note="held by other tenants before the engine starts",
            )
        )
    terms.append(
        Term(
            WEIGHTS,
            st.weights,
            TermSource.DERIVED,
            f"checkpoint bytes on this rank (tp {s.tensor_parallel_size}, pp stage {st.index + 1}/"
            f"{s.pipeline_parallel_size}): split tensors / tp, replicated ones (norms, routers, MLA q_a/kv_a) whole"
            + (
                f"; + {core.load_change.note}"
                if core.load_change and core.load_change.per_moe_layer_bytes
                else ""
            )
            + (f"; + rotary cos/sin cache {core.rope_bytes / MiB:.0f} MiB" if core.rope_bytes >= MiB else ""),
            0,
            "from the checkpoint's shapes: median 0.1 %, worst 1 % on the calibration logs (8 % on one held-out "
            "Gemma-2 log) (docs/accuracy.md)",
        )
    )
    terms.append(
        Term(
            ACTIVATION_PEAK,
            st.activation.bytes,
            TermSource.ESTIMATED,
            st.activation.formula,
            st.activation.uncertainty_bytes,
            "the profile run's torch peak above the weights (vLLM measures it; vramctl estimates)",
        )
    )
    non_torch = st.non_torch.bytes + st.outside.bytes
    terms.append(
        Term(
            NON_TORCH,
            non_torch,
            TermSource.ESTIMATED,
            f"{st.non_torch.formula}; outside the budget: {st.outside.formula}",
            st.non_torch.uncertainty_bytes + st.outside.uncertainty_bytes,
            f"{st.outside.bytes / GiB:.2f} GiB of it exists before vLLM's init snapshot and is not charged to "
            "gpu_memory_utilization"
            if not V.charges_nccl_to_budget(s.version)
            else "V0 before 0.7 read its baseline before NCCL init: NCCL buffers are charged to the budget",
        )
    )
    if s.cudagraph_capture_sizes:
        charged = st.graph_charged > 0
        terms.append(
            Term(
                CUDA_GRAPH,
                st.graph.bytes,
                TermSource.ESTIMATED,
                st.graph.formula,
                st.graph.uncertainty_bytes,
                "charged to the budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)"
                if charged
                else "not charged to the budget in this version/setting: taken from the headroom above u",
            )
        )
    kv_given = s.kv_cache_memory_bytes is not None
    terms.append(
        Term(
            KV_CACHE,
            st.kv_bytes,
            TermSource.GIVEN if kv_given else TermSource.DERIVED,
            "--kv-cache-memory-bytes (profiling skipped; ignores gpu_memory_utilization)"
            if kv_given
            else "requested − weights − activation peak − non-torch growth"
            + (" − graph estimate" if st.graph_charged else ""),
            0 if kv_given else kv_band,
            ""
            if kv_given or not kv_band
            else "± the estimated terms' bands summed: what the KV pool loses if they all land at the top",
        )
    )
    return Ledger.with_residual(
        core.capacity,
        terms,
        residual=SLACK,
        residual_formula=(
            "total − every other term (with --kv-cache-memory-bytes the utilisation plays no part)"
            if kv_given
            else f"total − every other term: (1 − u) × total = {(core.capacity - core.requested) / GiB:.2f} GiB "
            "held back, less what lives outside the budget"
        ),
    )


def _utilization_rows(
    model: ModelSpec, gpu: GpuSpec, core: _Core, cal: est.Calibration
) -> tuple[UtilizationRow, ...]:
    """The utilisation trade (vramctl.core.utilization) with this plan's non-KV estimate (it does not depend
    on u). Each row's risk then says whether the engine starts at that u: the row is planned again with vLLM's
    checks (`no-start` with the failure), and at the pessimistic edge of the estimates (`at-risk`)."""
    s = core.s
    bpr = max(1, core.blocks_per_request)
    rows = utilization_trade(
        core.capacity,
        core.non_kv_bytes,
        core.binding.bytes_per_block,
        bpr,
        s.max_model_len,
        (s.gpu_memory_utilization,),
        block_size=s.block_size,
        current=s.gpu_memory_utilization,
    )
    if s.kv_cache_memory_bytes is not None:
        return rows
    out: list[UtilizationRow] = []
    for row in rows:
        at_u = replace(s, gpu_memory_utilization=row.utilization)
        here = core if row.current else _core(model, gpu, at_u, core.capacity, cal)
        if row.risk != "no-kv" and here.verdict != FITS:
            row = replace(
                row,
                risk="no-start",
                note=f"does not start: {here.verdict} ({here.concurrency:.2f}x of one "
                f"{s.max_model_len}-token request)",
            )
        elif here.verdict == FITS:
            edge = _core(model, gpu, at_u, core.capacity, cal, +1)
            if edge.verdict != FITS:
                row = replace(
                    row,
                    risk="at-risk",
                    note=f"starts only if the estimates hold: at the pessimistic edge {edge.verdict} "
                    f"({edge.concurrency:.2f}x); {row.note}",
                )
        out.append(row)
    return tuple(out)


OLDEST_VLLM_VERSION = "0.6.0"
"""The oldest vLLM whose memory rules vramctl models (V0 0.6.x; `vllm/engine/arg_utils.py` (vLLM v0.33.0))."""


def _version_outside_known(version: str) -> str:
    """A warning when `version` lies outside the versions modelled: the nearest known rules are applied."""
    v = parse_version(version)
    if v > parse_version(LATEST_VLLM_VERSION):
        return (
            f"vLLM {version} is newer than the latest version vramctl models ({LATEST_VLLM_VERSION}): planned with "
            f"{LATEST_VLLM_VERSION}'s rules; check the release notes for memory-profiling changes"
        )
    if v < parse_version(OLDEST_VLLM_VERSION):
        return (
            f"vLLM {version} predates the oldest version vramctl models ({OLDEST_VLLM_VERSION}): planned with V0 "
            "0.6's rules, which may not be this version's"
        )
    return ""


def _explanations(model: ModelSpec, gpu: GpuSpec, core: _Core, ledger: Ledger) -> tuple[list[str], list[str]]:
    s = core.s
    st = core.binding
    notes: list[str] = []
    warnings: list[str] = []
    known = _version_outside_known(s.version)
    if known:
        warnings.append(known)
    u_default = "gpu_memory_utilization" in s.defaults_used
    notes.append(
        f"requested = ceil({core.capacity / GiB:.2f} GiB × {s.gpu_memory_utilization}) = {core.requested / GiB:.2f} GiB"
        + (f" (vLLM {s.version}'s default utilisation)" if u_default else "")
        + f"; the card's total is what CUDA reports for {gpu.display_name}, not its marketing size."
    )
    if s.max_num_active_seqs is not None:
        notes.append(
            f"--max-num-active-seqs {s.max_num_active_seqs}: at most {s.max_num_active_seqs} requests run at once; "
            f"the model runner, the sampler warm-up and the CUDA graphs stay sized for max_num_seqs "
            f"{s.max_num_seqs}, so no memory term moves (vllm/config/scheduler.py, 0.31.0 →)"
        )
    if s.kv_cache_memory_bytes is not None:
        notes.append(
            "--kv-cache-memory-bytes skips vLLM's memory profiling and ignores --gpu-memory-utilization: the KV pool "
            "is exactly the given size; nothing checks that it fits (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), open PR #56698)."
        )
        footprint = core.capacity - core.other_processes - ledger.bytes_of(SLACK)
        if ledger.bytes_of(SLACK) < 0:
            warnings.append(
                f"--kv-cache-memory-bytes {s.kv_cache_memory_bytes / GiB:.2f} GiB plus the estimated other terms "
                f"({(footprint - st.kv_bytes) / GiB:.2f} GiB) exceed the card's {core.capacity / GiB:.2f} GiB: expect "
                "an out-of-memory error at KV allocation or graph capture."
            )
    sub = V.subtraction_kind(s.version)
    notes.append(
        {
            "consumed": "vLLM ≥0.28 subtracts the free-memory drop since its init snapshot plus the transient peak "
            "headroom; the CUDA context, cuBLAS handles and NCCL communicators predate the snapshot and are not "
            "charged.",
            "profile-sum": "vLLM 0.8–0.26 subtracts weights + torch peak increase + non-torch increase since the init "
            "snapshot (taken after NCCL init).",
            "v0": "vLLM V0 subtracts weights + torch peak + non-torch growth from a baseline read before NCCL init, "
            "so NCCL buffers are charged to the budget.",
        }[sub]
    )
    if s.cudagraph_capture_sizes:
        if st.graph_charged:
            notes.append(
                f"CUDA-graph memory is estimated and subtracted (default since 0.20): {st.graph.bytes / GiB:.2f} GiB "
                f"over {len(s.cudagraph_capture_sizes)} capture sizes."
            )
        else:
            notes.append(
                f"CUDA graphs ({st.graph.bytes / GiB:.2f} GiB estimated) are captured after the KV pool and are not "
                "subtracted in this version/setting: they come out of the (1 − u) headroom."
            )
    else:
        notes.append("--enforce-eager: no CUDA graphs, no graph pool.")
    if model.num_sliding_layers and model.num_full_layers and kv_view_of_model(model, s.version) is not model:
        notes.append(
            f"vLLM {s.version} sizes every layer of this hybrid model as full attention (no hybrid KV manager)."
        )
    if s.pipeline_parallel_size > 1:
        notes.append(
            f"Pipeline stages hold {list(kvmath.pp_partition(model.num_hidden_layers, s.pipeline_parallel_size))} "
            f"layers; blocks are the minimum over ranks, so stage {st.index + 1} binds."
        )
    arch = model.architecture
    if "ConditionalGeneration" in arch or "VL" in arch or "Llava" in arch or "Vision" in arch:
        warnings.append(
            f"{arch} is multimodal: vLLM also profiles its vision encoder on a dummy image batch, which vramctl does "
            "not model, so the activation peak is under-estimated (Gemma-3 logs: 1–3 GiB more; docs/accuracy.md)."
        )
    if model.moe is not None and s.expert_parallel_size > 1:
        per_rank = -(-model.moe.num_experts // s.expert_parallel_size)
        notes.append(
            f"--enable-expert-parallel: the {model.moe.num_experts} routed experts are spread whole over "
            f"{s.expert_parallel_size} ranks (TP {s.tensor_parallel_size} × DP {s.data_parallel_size}), up to "
            f"{per_rank} per rank; attention and shared experts stay TP-split. The all-to-all buffers of an EP "
            "backend (DeepEP, pplx) and the larger fused-MoE workspace are not modelled (DeepSeek-R1 at TP 16: KV "
            "over-estimated by 20–40 %, docs/accuracy.md)."
        )
    elif model.moe is not None and s.tensor_parallel_size > 1:
        notes.append(
            "MoE experts are assumed sharded by TP; with --enable-expert-parallel each rank runs whole experts and "
            "the fused-MoE workspace is larger (DeepSeek-R1 at TP 16: KV over-estimated by 20–40 %, docs/accuracy.md)."
        )
    slots = core.lora
    if slots is not None:
        notes.append(
            f"--enable-lora: {slots.max_loras} adapter slot(s) at rank {slots.max_lora_rank} on every Linear"
            f"{' (fully sharded)' if slots.fully_sharded else ''}: "
            f"{slots.stage_bytes[st.index] / GiB:.2f} GiB on this rank, booked with the weights (vLLM allocates "
            "them while the model loads); with adapters vLLM also captures a second set of CUDA graphs "
            "(cudagraph_specialize_lora), so the graph pool can reach twice the estimate."
        )
    if s.data_parallel_size > 1:
        dp = s.data_parallel_size
        notes.append(
            f"--data-parallel-size {dp}: {dp} engine replicas of TP {s.tensor_parallel_size} × PP "
            f"{s.pipeline_parallel_size}, each with the per-rank numbers above and its own KV pool: "
            f"{dp * core.kv_tokens:,} KV tokens and {dp * core.concurrency:.2f}x concurrency across them, "
            f"on {dp * s.tensor_parallel_size * s.pipeline_parallel_size} GPUs."
        )
    seed_note = _seed_comparison(model, gpu, core)
    if seed_note:
        notes.append(seed_note)
    sampler = dict(st.activation.parts).get("sampler", 0)
    if sampler > st.activation.bytes // 2:
        notes.append(
            f"The sampler warm-up over {min(s.max_num_seqs, s.max_num_batched_tokens)} requests × {model.vocab_size} "
            f"vocab in fp32 dominates the activation peak ({sampler / GiB:.2f} GiB); --max-num-seqs lowers it."
        )
    slack = ledger.bytes_of(SLACK)
    if s.kv_cache_memory_bytes is None and 0 <= slack < max(_THIN_MARGIN_BYTES, int(0.02 * core.capacity)):
        warnings.append(
            f"Only {slack / GiB:.2f} GiB is left on the card after everything: graph-capture, fragmentation and "
            "logprob spikes live in that margin; lower --gpu-memory-utilization on shared or variable workloads."
        )
    if slack < 0 and s.kv_cache_memory_bytes is None:
        warnings.append(
            f"The estimated footprint exceeds the card by {-slack / GiB:.2f} GiB (memory outside the budget does not "
            "fit in the 1 − u headroom): expect an OOM during CUDA-graph capture or serving."
        )
    return notes, warnings


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


SEED_MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
SEED_GPU = "h100-sxm"
SEED_TOTAL_GIB = 79.6
"""The textbook worked example of this model on one H100 SXM: 79.6 GiB total, u 0.92, 14.96 GiB of weights, and the
logged `Available KV cache memory: 54.4 GiB` → 27,852 blocks of 16."""
SEED_KV_GIB = 54.4


def _seed_comparison(model: ModelSpec, gpu: GpuSpec, core: _Core) -> str | None:
    """Why this plan's KV differs from the textbook example's 54.4 GiB (the embedded default's model and card)."""
    s = core.s
    if model.name != SEED_MODEL or gpu.name != SEED_GPU or s.kv_cache_memory_bytes is not None:
        return None
    if s.tensor_parallel_size != 1 or s.pipeline_parallel_size != 1:
        return None
    st = core.binding
    u = s.gpu_memory_utilization
    seed_requested = SEED_TOTAL_GIB * u
    seed_other = seed_requested - model.weight_bytes / GiB - SEED_KV_GIB
    ours = (st.activation.bytes + st.non_torch.bytes + st.graph_charged) / GiB
    band = (
        st.activation.uncertainty_bytes + st.non_torch.uncertainty_bytes + st.graph.uncertainty_bytes
    ) / GiB
    sampler = dict(st.activation.parts).get("sampler", 0) / GiB
    return (
        f"Compared with the textbook worked example for this model and card (54.4 GiB of KV, 27,852 blocks): this plan has "
        f"{st.kv_bytes / GiB:.2f} GiB. The example takes {SEED_TOTAL_GIB} GiB as the total (nvidia-smi's MiB "
        f"total), CUDA reports {core.capacity / GiB:.2f} GiB here: {(SEED_TOTAL_GIB - core.capacity / GiB) * u:.2f} "
        f"GiB less budget at u = {u}. The example's numbers leave {seed_other:.2f} GiB for activation + non-torch "
        f"+ graphs; vramctl estimates {ours:.2f} ± {band:.2f} GiB (the sampler warm-up over "
        f"{min(s.max_num_seqs, s.max_num_batched_tokens)} × {model.vocab_size} fp32 logits alone is "
        f"{sampler:.2f} GiB). `--kv-cache-memory-bytes 54.4GiB` reproduces the example's blocks exactly."
    )


def plan_vllm(
    model: ModelSpec,
    gpu: GpuSpec,
    settings: ServeSettings,
    *,
    calibration: est.Calibration = est.CALIBRATION,
    light: bool = False,
) -> PlanResult:
    """The vLLM plan for one model, card and set of flags (`light`: without the utilisation table, for the fix
    search, which needs only the verdict and its edges; `calibration`: the estimate coefficients; the
    default is the fitted set, scripts/calibrate.py passes others for leave-one-out)."""
    version = V.resolve_version(settings.engine_version if settings.engine != "sglang" else None)
    loaded, model = model, vf.model_for_version(model, version, settings.engine)  # vLLM 0.30's yarn rule
    validate(model, gpu, settings)
    if model.state_space is not None:
        V.check_hybrid_supported(model.name, version)
    capacity = settings.gpu_memory_bytes or gpu.cuda_total_bytes
    fallback = V.v0_fallback(version, gpu.compute_capability, gpu.vendor)
    rules_version = V.V0_RULES_VERSION if fallback else version
    s = resolve_settings(model, gpu, settings, rules_version)
    s, external = vf.prepare(model, s, settings, capacity)  # --load-format ipc_cache, flag checks
    core = _core(model, gpu, s, capacity, calibration)
    auto_note = None
    edges: list[_Core] = []
    for edge in (+1, -1):
        at_edge = _core(model, gpu, s, capacity, calibration, edge)
        if settings.max_model_len == AUTO_MAX_MODEL_LEN:
            at_edge = _auto_fit(model, gpu, at_edge, capacity, calibration, edge)[0]
        edges.append(at_edge)
    if settings.max_model_len == AUTO_MAX_MODEL_LEN:
        core, auto_note = _auto_fit(model, gpu, core, capacity, calibration)
        s = core.s
    pessimistic, optimistic = (_edge_of(e) for e in edges)
    band = max(0, core.binding.kv_bytes - pessimistic.kv_cache_bytes)
    ledger = _ledger(core, band)
    notes, warnings = _explanations(model, gpu, core, ledger)
    if auto_note:
        notes.insert(0, auto_note)
    if fallback:
        notes.insert(
            0,
            f"vLLM {version} runs its V0 engine on this card (compute capability {gpu.compute_capability} < 8.0: "
            "`_is_v1_supported_oracle`, vllm/engine/arg_utils.py 0.8-0.10): planned with the V0 rules "
            f"(defaults, profiling, graphs) as of {V.V0_RULES_VERSION}",
        )
        s = replace(s, version=version)
    kv_model = kv_view_of_model(model, rules_version)
    result = PlanResult(
        engine="vllm",
        engine_version=version,
        model=model,
        gpu=gpu,
        settings=s,
        ledger=ledger,
        capacity_bytes=capacity,
        requested_bytes=core.requested,
        kv_cache_bytes=core.binding.kv_bytes,
        kv_bytes_per_token=kvmath.kv_bytes_per_token(
            kv_model,
            kv_cache_dtype=s.kv_cache_dtype,
            tp=s.tensor_parallel_size,
            pp=s.pipeline_parallel_size,
            model_dtype=s.dtype,
        ),
        bytes_per_block=core.binding.bytes_per_block,
        block_size=s.block_size,
        num_blocks=core.num_blocks,
        blocks_per_request=core.blocks_per_request,
        kv_tokens=core.kv_tokens,
        max_concurrency=core.concurrency,
        max_model_len=s.max_model_len,
        max_model_len_fit=core.max_model_len_fit,
        verdict=core.verdict,
        verdict_message=core.verdict_message,
        outside_budget_bytes=core.binding.outside.bytes
        + (0 if core.binding.graph_charged else core.binding.graph.bytes),
        binding_stage=core.binding.index,
        utilization_table=() if light else _utilization_rows(model, gpu, core, calibration),
        warnings=tuple(warnings),
        explanations=tuple(notes),
        kv_cache_uncertainty_bytes=band,
        pessimistic=pessimistic,
        optimistic=optimistic,
    )
    if model.state_space is not None:
        result = _with_hybrid(result, model, gpu, settings, core)
    annotated: PlanResult = vf.annotate(result, loaded, settings, external)
    return annotated


def plan(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, *, sglang_options: Any = None
) -> PlanResult:
    """Plan one deployment for `settings.engine` (`vllm`, `sglang` or `both`).

    `settings.quantization` (`--quantization`) is applied to the model first, as the engines apply it
    (`vramctl.core.quantization`): a mismatch with the checkpoint is bad input; online FP8 / bitsandbytes
    shrink the weights, and the plan says so in its explanations.
    """
    from vramctl.core.fixes import find_fixes

    result = _plan_quantized(model, gpu, settings, sglang_options)
    fixes = find_fixes(
        result, settings, lambda changed: _plan_quantized(model, gpu, changed, sglang_options, light=True)
    )
    return replace(result, fixes=fixes) if fixes else result


def _plan_quantized(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, sglang_options: Any, *, light: bool = False
) -> PlanResult:
    from vramctl.core.quantization import apply_quantization_flag

    quantized = apply_quantization_flag(model, settings.quantization, engine=settings.engine)
    result = _plan_served_model(quantized.model, gpu, settings, sglang_options=sglang_options, light=light)
    if quantized.note is None:
        return result
    return replace(result, explanations=(quantized.note, *result.explanations))


def _plan_served_model(
    model: ModelSpec,
    gpu: GpuSpec,
    settings: ServeSettings,
    *,
    sglang_options: Any = None,
    light: bool = False,
) -> PlanResult:
    """Plan one deployment for `settings.engine` (`vllm`, `sglang` or `both`), the model as served.

    `vllm`: the vLLM plan. `sglang`: the top-level terms, KV and verdict come from SGLang's sizing
    (`vramctl.core.engines.sglang.plan_sglang`), with the vLLM plan of the same flags kept for reference under
    nothing else. `both`: the vLLM plan at the top, SGLang's under `sglang`, and the gap explained term by term.
    A host tier (`--kv-offloading-size`, `--enable-hierarchical-cache`, `--hicache-*`) is sized when asked for.
    `sglang_options` (a `vramctl.core.engines.sglang.SglangOptions`) carries SGLang's flags beyond ServeSettings
    (DP attention, DeepEP, speculative decoding, disaggregation role, post-capture sizing).
    """
    from vramctl.core.engines import sglang as sg
    from vramctl.core.host_tier import plan_host_tier

    result = plan_vllm(model, gpu, settings, light=light)
    sglang_plan = None
    gap: tuple[Any, ...] = ()
    if settings.engine in ("sglang", "both"):
        sglang_plan = sg.plan_sglang(model, gpu, settings, options=sglang_options)
    if settings.engine == "both" and sglang_plan is not None:
        gap = () if light else sg.explain_gap(result, sglang_plan)
    host = None
    use_hicache = settings.engine == "sglang" or (settings.engine == "both" and _wants_hicache(settings))
    if sglang_plan is not None and use_hicache:
        host = plan_host_tier(
            model,
            gpu,
            settings,
            device_kv_tokens=sglang_plan.max_total_num_tokens,
            kv_bytes_per_token=sglang_plan.bytes_per_token,
            engine="sglang",
            page_size=sglang_plan.page_size,
        )
    elif settings.kv_offloading_size_gib is not None:
        host = plan_host_tier(
            model,
            gpu,
            settings,
            # the pool's token slots (blocks × block size), as `check` sizes the tier: one rule for both
            device_kv_tokens=result.num_blocks * result.block_size,
            kv_bytes_per_token=result.kv_bytes_per_token,
            engine="vllm",
        )
    result = replace(result, sglang=sglang_plan, gap=gap, host_tier=host)
    if settings.engine == "sglang" and sglang_plan is not None:
        result = _sglang_top_level(result, sglang_plan)
        if not light:
            result = replace(
                result,
                utilization_table=_sglang_fraction_rows(model, gpu, settings, sglang_options, sglang_plan),
            )
    warnings = list(result.warnings)
    status = getattr(host, "status", None)
    if status == "fail" and result.verdict == FITS:
        # The GPU side fits but the host pool cannot be pinned: the server does not start (exit 1).
        return replace(
            result,
            warnings=tuple(warnings),
            verdict=HOST_PINNED_MEMORY_FAILURE,
            verdict_message=str(getattr(host, "message", "")),
        )
    if status in ("warning", "fail"):
        warnings.append(str(getattr(host, "message", "")))
    return replace(result, warnings=tuple(warnings))


def _sglang_fraction_rows(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, options: Any, current: Any
) -> tuple[UtilizationRow, ...]:
    """SGLang's side of the utilisation trade: the same plan at each `--mem-fraction-static` of the grid and the
    one in use (SGLang's own sizing rerun, so every branch applies), with the held-back memory judged against
    the reserve SGLang's default is computed from (`fraction_risk`)."""
    from vramctl.core.engines import sglang as sg
    from vramctl.core.utilization import SGLANG_FRACTIONS, fraction_risk

    mfs = float(current.mem_fraction_static)
    if not 0 < mfs < 1 or current.verdict == WEIGHTS_DO_NOT_FIT:
        return ()
    reserve = current.reserve
    reserve_mib = float(reserve.total_mib) if reserve is not None else 0.0
    runtime_mib = float(reserve.activation_mib + reserve.graph_mib) if reserve is not None else 0.0
    gpu_mem_mib = float(current.gpu_mem_mib or 0)
    page = max(1, int(current.page_size))
    rows: list[UtilizationRow] = []
    for f in sorted({*SGLANG_FRACTIONS, mfs}):
        p = (
            current
            if f == mfs
            else sg.plan_sglang(model, gpu, settings.with_changes(mem_fraction_static=f), options=options)
        )
        tokens = int(p.max_total_num_tokens)
        held = int(p.held_back_bytes)
        if tokens <= 0:
            risk: Any = "no-kv"
            note = "no KV pool: the weights leave nothing of the static budget"
        else:
            risk, note = fraction_risk(
                f,
                held,
                int(p.capacity_bytes),
                gpu_mem_mib=gpu_mem_mib,
                reserve_mib=reserve_mib,
                runtime_mib=runtime_mib,
            )
        rows.append(
            UtilizationRow(
                f,
                int(p.capacity_bytes) - held,
                held,
                int(p.kv_cache_bytes),
                tokens // page,
                tokens,
                float(p.concurrency_at_context),
                risk,
                note,
                current=f == mfs,
            )
        )
    base = next(r for r in rows if r.current)
    return tuple(
        replace(
            r,
            delta_kv_bytes=max(0, r.kv_bytes) - max(0, base.kv_bytes),
            delta_concurrency=r.max_concurrency - base.max_concurrency,
        )
        for r in rows
    )


def _wants_hicache(settings: ServeSettings) -> bool:
    return (
        settings.enable_hierarchical_cache
        or bool(settings.hicache_size_gb)
        or settings.hicache_ratio is not None
    )


def _sglang_top_level(result: PlanResult, sgp: Any) -> PlanResult:
    """`--engine sglang`: the headline numbers in SGLang's semantics (its ledger, pool, verdict)."""
    page = max(1, int(sgp.page_size))
    tokens = int(sgp.max_total_num_tokens)
    context = int(sgp.context_len) or result.max_model_len
    fit = min(tokens, result.model.max_position_embeddings)
    return replace(
        result,
        engine="sglang",
        engine_version=str(sgp.version),
        ledger=sgp.ledger,
        capacity_bytes=int(sgp.capacity_bytes),
        requested_bytes=int(sgp.capacity_bytes) - int(sgp.held_back_bytes),
        kv_cache_bytes=int(sgp.kv_cache_bytes),
        kv_bytes_per_token=int(sgp.bytes_per_token),
        bytes_per_block=int(sgp.bytes_per_token) * page,
        block_size=page,
        num_blocks=tokens // page,
        blocks_per_request=cdiv(context, page),
        kv_tokens=tokens,
        max_concurrency=float(sgp.concurrency_at_context),
        max_model_len=context,
        max_model_len_fit=fit,
        verdict=str(sgp.verdict),
        verdict_message=str(sgp.message),
        utilization_table=(),
        explanations=tuple(sgp.notes),
        warnings=(),
        kv_cache_uncertainty_bytes=0,  # SGLang sizes its pool from free memory it measures: no band to carry
        pessimistic=None,
        optimistic=None,
        hybrid=None,  # SGLang's state pool is under `sglang.mamba` and its ledger's mamba_state term
    )


# --- hybrid attention + Mamba2 / Gated DeltaNet models (docs/hybrid.md) ------------------------------------------


def _hybrid_kv(model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, version: str) -> kvmath.HybridKv:
    """vLLM's page-size unification for this model, card and flags (`vramctl.core.kv.hybrid_kv`)."""
    return kvmath.hybrid_kv(
        model,
        tp=settings.tensor_parallel_size,
        kv_cache_dtype=settings.kv_cache_dtype or "auto",
        model_dtype=_compute_dtype(model, settings.dtype),
        user_block_size=settings.block_size,
        version=parse_version(version),
        compute_capability=gpu.compute_capability,
        mamba_cache_dtype=settings.mamba_cache_dtype or "auto",
        # the flag wins; only `auto` goes through the model's hook (Nemotron-H's float32)
        mamba_ssm_cache_dtype=settings.mamba_ssm_cache_dtype
        if settings.mamba_ssm_cache_dtype not in ("", "auto")
        else V.default_mamba_ssm_cache_dtype(
            model.architecture, model.state_space.ssm_dtype if model.state_space else None, version
        ),
    )


@dataclass(frozen=True)
class HybridPlan:
    """The recurrent-state side of a hybrid model's vLLM plan, on the binding rank."""

    state_kind: str
    full_attention_layers: int
    state_layers: int
    mlp_only_layers: int
    kv: kvmath.HybridKv
    group_size: int
    attention_groups: int
    state_groups: int
    attention_blocks_per_request: int
    state_blocks_per_request: int
    state_bytes_per_request: int
    """Unpadded conv + SSM state of every state layer on this rank, one request."""
    state_bytes_per_request_padded: int
    """What those layers take from the pool: state layers × the unified page."""
    attention_bytes_per_request: int
    """Attention KV of one max_model_len request on this rank (full-attention layers × blocks × page)."""
    num_blocks: int
    max_concurrency: float
    kv_tokens: int
    state_bytes_at_max_concurrency: int
    log_lines: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "state_kind": self.state_kind,
            "full_attention_layers": self.full_attention_layers,
            "state_layers": self.state_layers,
            "mlp_only_layers": self.mlp_only_layers,
            **self.kv.to_json(),
            "group_size": self.group_size,
            "attention_groups": self.attention_groups,
            "state_groups": self.state_groups,
            "attention_blocks_per_request": self.attention_blocks_per_request,
            "state_blocks_per_request": self.state_blocks_per_request,
            "state_bytes_per_request": self.state_bytes_per_request,
            "state_bytes_per_request_padded": self.state_bytes_per_request_padded,
            "attention_bytes_per_request": self.attention_bytes_per_request,
            "num_blocks": self.num_blocks,
            "max_concurrency": round(self.max_concurrency, 4),
            "kv_tokens": self.kv_tokens,
            "state_bytes_at_max_concurrency": self.state_bytes_at_max_concurrency,
            "mamba_cache_mode": "none",
            "log_lines": list(self.log_lines),
        }


def _with_hybrid(
    result: PlanResult, model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, core: _Core
) -> PlanResult:
    """Attach the state term: per-request state bytes, blocks, concurrency, vLLM's two hybrid log lines, and a note
    on the KV term saying how much of the shared pool the state takes at full concurrency (the ledger still sums:
    attention pages and mamba pages are one pool, `num_blocks × bytes_per_block`)."""
    s = core.s
    hkv = _hybrid_kv(model, gpu, settings, s.version)
    kinds = kvmath.stage_layer_kinds(model, s.pipeline_parallel_size)[core.binding.index]
    layout = kvmath.stage_layout(kinds)
    attention_groups = sum(1 for g in layout.groups if g.kind != kvmath.STATE_GROUP)
    state_groups = len(layout.groups) - attention_groups
    full_blocks = cdiv(s.max_model_len, s.block_size)
    n_state = layout.num_state_layers
    state_raw = n_state * hkv.state_page_bytes
    state_padded = n_state * hkv.page_bytes
    attention_bytes = layout.num_full_layers * full_blocks * hkv.page_bytes
    held = int(core.concurrency) * state_padded
    st = model.state_space
    assert st is not None
    lines = []
    if hkv.block_size_raised:
        lines.append(V.hybrid_block_size_log(hkv.block_size))
    if hkv.page_bytes != hkv.state_page_bytes:
        lines.append(V.hybrid_padding_log(hkv.padding_pct))
    hybrid = HybridPlan(
        state_kind=st.kind,
        full_attention_layers=layout.num_full_layers,
        state_layers=n_state,
        mlp_only_layers=len(kinds) - layout.num_full_layers - n_state - layout.num_sliding_layers,
        kv=hkv,
        group_size=layout.group_size,
        attention_groups=attention_groups,
        state_groups=state_groups,
        attention_blocks_per_request=attention_groups * full_blocks,
        state_blocks_per_request=state_groups * kvmath.STATE_BLOCKS_PER_REQUEST,
        state_bytes_per_request=state_raw,
        state_bytes_per_request_padded=state_padded,
        attention_bytes_per_request=attention_bytes,
        num_blocks=core.num_blocks,
        max_concurrency=core.concurrency,
        kv_tokens=core.kv_tokens,
        state_bytes_at_max_concurrency=held,
        log_lines=tuple(lines),
    )
    kind = "Gated DeltaNet" if st.kind == "gated_delta_net" else "Mamba2"
    notes = [
        f"Hybrid ({kind} + attention): {n_state} {kind} layers keep a fixed state per request "
        f"({state_raw / MiB:.2f} MiB per rank: conv {hkv.shapes.conv} + SSM {hkv.shapes.ssm} per layer) and "
        f"{layout.num_full_layers} full-attention layers keep KV; vLLM raises the attention block to "
        f"{hkv.block_size} tokens so one attention page ({hkv.page_bytes:,} B) holds a mamba page "
        f"({hkv.state_page_bytes:,} B, padded {hkv.padding_pct:.2f} %).",
        f"Per {s.max_model_len:,}-token request: {attention_groups * full_blocks:,} attention blocks + "
        f"{state_groups} state block(s) of the {core.num_blocks:,} (groups of {layout.group_size} layers: "
        f"{attention_groups} attention, {state_groups} state); state {state_padded / MiB:.2f} MiB, attention "
        f"{attention_bytes / GiB:.2f} GiB per rank; at {core.concurrency:.2f}x the state holds "
        f"{held / GiB:.2f} GiB of the pool.",
        "Hybrids run with prefix caching off by default in vLLM (mamba_cache_mode none: one state block per "
        "request); --enable-prefix-caching ('align' mode) keeps more state blocks per request and aligns the "
        "block size to the mamba chunk: not modelled.",
    ]
    kv_note = (
        f"one pool for attention KV and {kind} state: {state_groups} of the {len(layout.groups)} groups hold state "
        f"({state_padded / MiB:.2f} MiB per request); {held / GiB:.2f} GiB of it at {core.concurrency:.2f}x"
    )
    ledger = Ledger(
        result.ledger.capacity_bytes,
        tuple(replace(t, note=kv_note) if t.name == KV_CACHE else t for t in result.ledger.terms),
    )
    return replace(result, hybrid=hybrid, ledger=ledger, explanations=(*result.explanations, *notes))


__all__ = [
    "FITS",
    "GPU_UTIL_EXCEEDS_FREE",
    "KV_POOL_OVERCOMMIT",
    "KV_TOO_SMALL",
    "NO_KV_CACHE_MEMORY",
    "WEIGHTS_DO_NOT_FIT",
    "PlanEdge",
    "PlanResult",
    "VllmSettings",
    "plan",
    "plan_vllm",
    "resolve_settings",
    "validate",
]
