"""vLLM's settings as the engine resolves them: every default filled in for one version and card, and the
flags vLLM itself would refuse (`validate`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vramctl.core import kv as kvmath
from vramctl.core import lora, mamba_cache
from vramctl.core.dsv4_cache import DSV4_BLOCK_SIZE
from vramctl.core.engines import vllm_runtime as RT
from vramctl.core.engines import vllm_speculative as SP
from vramctl.core.engines.vllm import rules as V
from vramctl.core.engines.vllm.kv_manager import compute_dtype as _compute_dtype
from vramctl.core.engines.vllm.kv_manager import hybrid_kv_for as _hybrid_kv
from vramctl.core.engines.vllm.kv_manager import resolved_mamba_cache_mode
from vramctl.core.engines.vllm.kv_manager import state_only_kv_for as _state_only_kv
from vramctl.core.engines.vllm.multimodal import MmEncoderProfile, mm_encoder_profile
from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.engines.vllm.scheduler import (
    apply_scheduler_caps,
    default_capture_sizes,
    default_scheduler_limits,
)
from vramctl.core.errors import BadInputError
from vramctl.core.settings import LATEST_VLLM_VERSION, ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec, dtype_bytes
from vramctl.core.units import GiB

VALID_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
"""The block sizes every vLLM from 0.11.1 to 0.17 accepts (`VllmRules.block_sizes` is the per-version list `plan`
checks); `profile` / `suggest` / `validate` build their own KV pool and keep to these."""
_ABSURD_TOKENS = 1 << 26
AUTO_MAX_MODEL_LEN = -1
"""`--max-model-len auto` (or -1): vLLM fits the length to the KV pool (0.12 →)."""


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
    sampler: str = "pytorch"
    """The sampler the profile run warms up (`vllm_runtime.sampler_kind`): `pytorch` or `flashinfer`."""
    custom_all_reduce: bool = False
    """vLLM's custom all-reduce carries the TP reductions (`vllm_runtime.custom_all_reduce`)."""
    peer_to_peer: bool = True
    """GPU peer access between the ranks (GeForce: none)."""
    release: str | None = None
    """The vLLM release itself where `version` holds the V0 rules it falls back to (0.8-0.10 on V0)."""
    sampler_reason: str = ""
    """Why `sampler` (`vllm_runtime.sampler_kind`)."""
    weights_outside_budget: bool = False
    """Weights mapped from a weight-cache daemon and not charged (vramctl.core.engines.vllm_external_weights)."""
    mamba_cache_mode: str = "none"
    """A hybrid's state blocks per request: `align` (prefix caching, the default from vLLM 0.28; asked for on
    0.15-0.27 for the classes without mamba 'all' mode) holds two, `none` one, `all` (0.15-0.31) one per block of
    max_model_len; `unmodelled` (0.12-0.14's per-block state, 'all' on a model of state layers only) is planned as
    `none` (vramctl/core/mamba_cache.py).
    Not in `to_json` (every other plan's JSON unchanged): `hybrid.mamba_cache_mode` reports it."""
    extensible_kv_cache: bool = False
    """vLLM 0.34 →: the pool is sized after warm-up and graph capture from the memory then free
    (`rules.extensible_kv_cache`). In `to_json` only when on."""
    cudagraph_mode: str | None = None
    """The CUDA-graph mode set by `--compilation-config` / `-O N` (`rules.cudagraph_mode`); None: the release's
    default regime. In `to_json` only when set."""

    prefill_checkpoint_blocks: int = 0
    """`num_prefill_checkpoint_blocks` of the model's state layers (1: Mamba2 on vLLM 0.32 →,
    `VllmRules.mamba2_prefill_checkpoint`); counted in the 'align' mode only."""

    state_page_bytes: int = 0
    """A model without attention layers (pure Mamba, an all-Mamba Granite-4.0-H): one layer's unpadded state on one
    rank (`kv.state_only_kv`); 0 for every other model, whose page is block_size × the attention bytes per token.
    Not in `to_json`."""

    mm_encoder: MmEncoderProfile | None = None
    """The multimodal encoder's share of the profile run (vramctl.core.engines.vllm.multimodal); None for a text model,
    an unknown tower or V0. Not in `to_json`: the plan's `multimodal_encoder` key reports it."""

    speculative: SP.Speculative | None = None
    """`--speculative-config` resolved for the model and version (vramctl.core.engines.vllm_speculative); None
    without it (or with num_speculative_tokens 0). In `to_json` only when set."""

    @property
    def state_blocks(self) -> int:
        extra = self.speculative.state_blocks if self.speculative is not None else 0
        if self.mamba_cache_mode == "all" and not rules_for(self.version).mamba_all_speculative_blocks:
            extra = 0  # 'all' counts num_speculative_blocks from 0.24 (VllmRules.mamba_all_speculative_blocks)
        return (
            mamba_cache.state_blocks_per_request(
                self.mamba_cache_mode,
                self.prefill_checkpoint_blocks,
                max_model_len=self.max_model_len,
                mamba_block_size=self.block_size,
            )
            + extra
        )

    @property
    def drafter_kv_layers(self) -> int:
        return self.speculative.drafter_kv_layers if self.speculative is not None else 0

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
        if self.extensible_kv_cache:  # likewise: vLLM 0.34 → only
            out["extensible_kv_cache"] = True
        if self.cudagraph_mode is not None:  # likewise
            out["cudagraph_mode"] = self.cudagraph_mode
        if self.speculative is not None:  # likewise: only with --speculative-config
            sp = self.speculative
            speculative: dict[str, Any] = {
                "method": sp.method,
                "num_speculative_tokens": sp.num_speculative_tokens,
                "drafter_kv_layers": sp.drafter_kv_layers,
                "extra_state_blocks": sp.state_blocks,
                "extra_conv_columns": sp.conv_columns,
            }
            if sp.draft is not None:  # only with a counted draft model
                speculative["draft_model"] = sp.draft.name
                speculative["draft_tensor_parallel_size"] = sp.draft_tensor_parallel_size
                speculative["draft_layers"] = sp.draft_layers
            if sp.profile is not None:  # the profile run's and graph capture's parts (vllm_speculative)
                speculative["profile_run"] = sp.profile.to_json()
            out["speculative"] = speculative
        return out



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
    # a state-only pool without prefix caching has a block of max_model_len (the engine tier passes the block size
    # vLLM reports back as --block-size), so it is exempt from the version's list
    version = settings.engine_version or LATEST_VLLM_VERSION
    accepted = rules_for(version).block_sizes
    _check_positive(settings.block_size, "--block-size", upper=1 << 20)
    if (
        settings.block_size is not None
        and accepted is not None
        and settings.block_size not in accepted
        and not model.is_state_only
    ):
        raise BadInputError(
            f"--block-size {settings.block_size}: vLLM {version} accepts {', '.join(str(b) for b in accepted)}"
            " (any positive size from 0.18.0)"
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
        and not model.max_len_assumed
    ):
        raise BadInputError(
            f"--max-model-len {mml}: User-specified max_model_len ({mml}) is greater than the derived max_model_len "
            f"(max_position_embeddings={model.vllm_max_model_len} in model's config.json); vLLM refuses it unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (or --hf-overrides raises the derived length: a rope scaling, or for yarn "
            "from vLLM 0.30 max_position_embeddings itself)"
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



def default_block_size_for(model: ModelSpec, gpu: GpuSpec, version: str) -> int:
    """The release's default (16 through 0.33, 64 from 0.34: `rules.default_block_size`), raised for MLA on FlashMLA
    (Hopper, 64) and CUTLASS MLA (data-center Blackwell, 128) (`vllm/config/cache.py` (vLLM v0.33.0);
    `get_preferred_block_size`, `vllm/v1/attention/backend.py:158-166` (0.34.0)); 256 for DeepSeek-V4, whose sparse
    MLA and indexer backends take no other size (vramctl.core.dsv4_cache.DSV4_BLOCK_SIZE)."""
    if model.dsv4 is not None:
        return DSV4_BLOCK_SIZE
    if model.is_mla and not V.is_v0(version) and gpu.compute_capability:
        major = gpu.compute_capability.split(".")[0]
        if model.mla is not None and model.mla.indexer_head_dim and major in ("9", "10"):
            # DeepSeek-V3.2 runs a sparse MLA backend: FLASHMLA_SPARSE's kernel blocks are MultipleOf(64), so
            # `get_preferred_block_size` raises a default of 16 to 64 and keeps 64 (vllm/v1/attention/backends/mla/
            # flashmla_sparse.py, vllm/v1/attention/backend.py, v0.32.0); CUTLASS MLA's 128 does not apply
            return max(64, V.default_block_size(version))
        if major == "9":
            return max(64, V.default_block_size(version))
        if major == "10":
            return max(128, V.default_block_size(version))
    return V.default_block_size(version)


def _state_pool(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, version: str, block: int, mml: int
) -> tuple[int, int, str]:
    """(block size, state page of a model without attention layers or 0, mamba_cache_mode) for a model with state
    layers (docs/hybrid.md); (block, 0, mode) unchanged for any other model."""
    mode = _mamba_cache_mode(model, settings, version)
    if model.is_state_only:
        if model.is_attention_free and settings.enable_prefix_caching:
            raise BadInputError(
                f"--enable-prefix-caching: {model.name} is attention-free (pure Mamba); vLLM turns prefix caching "
                "off for such models by default (ModelConfig.is_prefix_caching_supported) and vramctl does not "
                "model the 'align' state pool it would run with it on: plan without the flag"
            )
        # the mamba block: max_model_len without prefix caching, the cache block size with it ('align')
        sokv = _state_only_kv(model, settings, block if mode == "align" else mml, version)
        return sokv.block_size, sokv.state_page_bytes, mode
    if model.state_space is not None:
        return _hybrid_kv(model, gpu, settings, version).block_size, 0, mode
    return block, 0, mode


def _capture_sizes(
    settings: ServeSettings,
    gpu: GpuSpec,
    version: str,
    graphs: str | None,
    *,
    seqs: int,
    tokens: int,
    speculative: SP.Speculative | None,
) -> tuple[int, ...]:
    """The CUDA-graph batch sizes captured: none when eager, the user's (up to the token budget), else vLLM's
    default grid (a speculative decode step is 1 + the draft tokens long)."""
    if settings.enforce_eager or graphs == "NONE":
        return ()
    if settings.cudagraph_capture_sizes is not None:
        return tuple(sorted({s for s in settings.cudagraph_capture_sizes if 0 < s <= tokens}))
    return default_capture_sizes(
        seqs,
        tokens,
        gpu,
        version,
        max_capture_size=settings.max_cudagraph_capture_size,
        decode_query_len=1 + (speculative.num_speculative_tokens if speculative is not None else 0),
    )


def resolve_settings(model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, version: str) -> VllmSettings:
    defaults: list[str] = []
    extensible, u = _sizing_mode(gpu, settings, version, defaults)
    mml = settings.max_model_len
    if mml is None or mml == AUTO_MAX_MODEL_LEN:
        mml = model.vllm_max_model_len
        defaults.append("max_model_len")
    table_tokens, table_seqs = default_scheduler_limits(
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
        # `use_long_context = max_model_len > 32768`; chunked prefill not with LoRA, a sliding window, MLA or a
        # multimodal model (_set_default_args_v0, vllm/engine/arg_utils.py 0.8.5)
        long_context = (
            mml > 32768
            and not settings.enable_lora
            and not model.num_sliding_layers
            and not model.is_mla
            and not model.is_multimodal
        )
        chunked = (
            settings.enable_chunked_prefill if settings.enable_chunked_prefill is not None else long_context
        )
    tokens, seqs = apply_scheduler_caps(
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
    block, state_page, mode = _state_pool(model, gpu, settings, version, block, mml)
    estimate_cg = settings.estimate_cudagraphs
    if estimate_cg is None:
        estimate_cg = V.estimate_cudagraphs_default(version)
        defaults.append("estimate_cudagraphs")
    elif estimate_cg and not V.supports_cudagraph_estimate(version):
        estimate_cg = False
    graphs = V.cudagraph_mode(version, settings.cudagraph_mode, settings.optimization_level)
    speculative = SP.resolve_settings(model, version, settings)
    sizes = _capture_sizes(settings, gpu, version, graphs, seqs=seqs, tokens=tokens, speculative=speculative)
    sampler, sampler_reason = RT.sampler_kind(
        version, v0_engine=V.is_v0(version), gpu=gpu, flashinfer_env=settings.flashinfer_sampler
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
        sampler=sampler,
        sampler_reason=sampler_reason,
        custom_all_reduce=RT.custom_all_reduce(
            settings.tensor_parallel_size, gpu, disabled=settings.disable_custom_all_reduce
        ).custom,
        peer_to_peer=gpu.vendor != "nvidia" or RT.peer_to_peer(gpu),
        mamba_cache_mode=mode,
        state_page_bytes=state_page,
        cudagraph_mode=None if settings.enforce_eager else graphs,
        extensible_kv_cache=extensible,
        speculative=speculative,
        mm_encoder=_mm_encoder(model, settings, version, tokens=tokens, mml=mml, seqs=seqs, chunked=chunked),
        prefill_checkpoint_blocks=int(
            model.state_space is not None
            and model.state_space.kind == "mamba2"
            and rules_for(version).mamba2_prefill_checkpoint
        ),
    )


def _mm_encoder(
    model: ModelSpec, settings: ServeSettings, version: str, *, tokens: int, mml: int, seqs: int, chunked: bool
) -> MmEncoderProfile | None:
    """The multimodal encoder's share of the profile run for these flags (vramctl.core.engines.vllm.multimodal)."""
    return mm_encoder_profile(
        model,
        rules_for(version),
        max_num_batched_tokens=tokens,
        max_model_len=mml,
        max_num_seqs=seqs,
        tp=settings.tensor_parallel_size,
        act_bytes=min(dtype_bytes(_compute_dtype(model, settings.dtype)) or 2, 2),
        limits=settings.limit_mm_per_prompt,
        max_pixels=settings.mm_max_pixels,
        skip=settings.skip_mm_profiling,
        language_model_only=settings.language_model_only,
        tp_mode=settings.mm_encoder_tp_mode,
        chunked_prefill=chunked,
    )


def _sizing_mode(gpu: GpuSpec, settings: ServeSettings, version: str, defaults: list[str]) -> tuple[bool, float]:
    """(the extensible KV cache on, gpu_memory_utilization): 1.0 by default with the extensible KV cache (0.34 →),
    the release's default otherwise (`rules.extensible_kv_cache`, `rules.EXTENSIBLE_DEFAULT_UTILIZATION`)."""
    extensible = V.extensible_kv_cache(
        version,
        requested=settings.enable_extensible_kv_cache,
        kv_cache_memory_bytes=settings.kv_cache_memory_bytes,
        vendor=gpu.vendor,
    )
    u = settings.gpu_memory_utilization
    if u is None:
        u = V.EXTENSIBLE_DEFAULT_UTILIZATION if extensible else V.default_gpu_memory_utilization(version)
        defaults.append("gpu_memory_utilization")
    return extensible, u


def _mamba_cache_mode(model: ModelSpec, settings: ServeSettings, version: str) -> str:
    """A hybrid's mamba_cache_mode for these flags and this version (`kv_manager.resolved_mamba_cache_mode`); a
    model of state layers only in mode 'all' is `unmodelled` (planned with one state block)."""
    mode = resolved_mamba_cache_mode(model, settings, version)
    return "unmodelled" if mode == "all" and model.is_state_only else mode


def _active_seqs(settings: ServeSettings, version: str, max_num_seqs: int) -> int | None:
    """`--max-num-active-seqs` (vLLM 0.31.0 →, `vllm/config/scheduler.py`): admission into RUNNING only; it must
    not exceed max_num_seqs (the same ValueError as vLLM's) and moves no memory term."""
    active = settings.max_num_active_seqs
    if active is None:
        return None
    if not rules_for(version).has_max_num_active_seqs:
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

