"""The KV pool as vLLM's KV cache manager sees it: the model view by version, bytes per block of a stage, the
LoRA slots and weights per rank, the largest fitting length, and the hybrid page unification."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from vramctl.core import kv as kvmath
from vramctl.core import lora, mamba_cache
from vramctl.core.dsv4_cache import Dsv4Cache
from vramctl.core.engines import vllm_speculative as SP
from vramctl.core.engines.vllm import rules as V
from vramctl.core.errors import BadInputError
from vramctl.core.gemma4_cache import Gemma4Cache
from vramctl.core.settings import ServeSettings, parse_version
from vramctl.core.specs import FULL_ATTENTION, STATE_KINDS, GpuSpec, ModelSpec, dtype_bytes
from vramctl.core.weights import stage_rank_weight_bytes

if TYPE_CHECKING:
    from vramctl.core.engines.vllm.defaults import VllmSettings


def compute_dtype(model: ModelSpec, dtype: str) -> str:
    """vLLM `--dtype auto`: the checkpoint's dtype, but fp16 for a float32 checkpoint (vllm/config/model.py)."""
    if dtype not in ("auto", ""):
        return dtype
    try:
        size = dtype_bytes(model.torch_dtype)
    except KeyError:
        return "bfloat16"
    return "float16" if size > 2 else model.torch_dtype



def kv_view_of_model(model: ModelSpec, version: str, drafter_layers: int = 0) -> ModelSpec:
    """The model as the version's KV manager sees it: V0, and V1 before the hybrid allocator (0.10), size
    sliding-window layers of a hybrid model as full attention (datapoint 119: "V0 sizes KV as if every layer were
    full attention"; `unify_hybrid_kv_cache_specs`). `drafter_layers`: a speculative drafter's full-attention
    layers (MTP), which join the KV groups as layers of the target's shape after its own
    (vramctl.core.engines.vllm_speculative)."""
    hybrid = model.num_sliding_layers and model.num_full_layers
    rules = V.rules_for(version)
    if model.num_sliding_layers and (rules.v0 or (hybrid and not rules.hybrid_kv_manager)):
        model = replace(model, layer_types=(FULL_ATTENTION,) * model.num_hidden_layers, sliding_window=None)
    if drafter_layers:
        kinds = model.attention_kinds()
        if len(kinds) != model.num_hidden_layers:  # Falcon-H1 / Zamba2 list two kinds for some layers
            raise BadInputError(
                f"--speculative-config: an MTP drafter on {model.name} (attention beside the state mixer in one "
                "layer) is not modelled"
            )
        model = replace(
            model,
            layer_types=(*kinds, *(FULL_ATTENTION,) * drafter_layers),
            num_hidden_layers=model.num_hidden_layers + drafter_layers,
        )
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



def own_cache_of(kv_model: ModelSpec, s: VllmSettings) -> Dsv4Cache | Gemma4Cache | None:
    """The pool of a model with its own cache layout for these flags (`kvmath.own_layout_cache`: DeepSeek-V4,
    Gemma-4); None for any other model."""
    return kvmath.own_layout_cache(
        kv_model, block_size=s.block_size, tp=s.tensor_parallel_size, kv_cache_dtype=s.kv_cache_dtype
    )


def in_flight_tokens(s: VllmSettings, version: tuple[int, ...]) -> int:
    """Tokens a window cache keeps beyond its window (`VllmConfig.max_in_flight_tokens`, kvmath)."""
    return kvmath.max_in_flight_tokens(
        s.max_num_batched_tokens, version=version, pp=s.pipeline_parallel_size, async_scheduling=s.async_scheduling
    )


def blocks_per_request_of(kv_model: ModelSpec, s: VllmSettings, version: tuple[int, ...]) -> int:
    """Block ids one max_model_len request takes from the shared pool on the binding stage
    (`kvmath.blocks_per_request`; DeepSeek-V4: Σ over its packed groups, `Dsv4Cache.blocks_per_request`)."""
    cache = own_cache_of(kv_model, s)
    if cache is not None:
        return cache.blocks_per_request(s.max_model_len, in_flight_tokens(s, version))
    return kvmath.blocks_per_request(
        kv_model,
        max_model_len=s.max_model_len,
        block_size=s.block_size,
        max_num_batched_tokens=s.max_num_batched_tokens,
        version=version,
        pp=s.pipeline_parallel_size,
        async_scheduling=s.async_scheduling,
        state_blocks=s.state_blocks,
    )


def _stage_bytes_per_block(kv_model: ModelSpec, s: VllmSettings, stage: int) -> int:
    cache = own_cache_of(kv_model, s)
    if cache is not None:  # every rank holds the whole packed pool (max_tp_shards=1)
        return cache.bytes_per_block
    kinds = kvmath.stage_layer_kinds(kv_model, s.pipeline_parallel_size)[stage]
    if s.state_page_bytes:  # no attention: one group of every state layer (`_get_kv_cache_groups_uniform_spec`)
        return kvmath.stage_layout(kinds).group_size * s.state_page_bytes
    page = kvmath.page_size_bytes(
        kv_model,
        block_size=s.block_size,
        kv_cache_dtype=s.kv_cache_dtype,
        tp=s.tensor_parallel_size,
        model_dtype=s.dtype,
    )
    return kvmath.stage_layout(kinds).group_size * page


def _request_kv_bytes(kv_model: ModelSpec, s: VllmSettings, length: int, version: tuple[int, ...]) -> int:
    """One request's KV at `length` tokens on one rank (`vramctl.core.kv.per_request_kv_bytes`); a model without
    attention layers holds its state whatever the length (`MambaSpec.max_memory_usage_bytes`: the page × the state
    blocks of the mode)."""
    cache = own_cache_of(kv_model, s)
    if cache is not None:  # `_max_memory_usage_bytes_from_groups`: bytes_per_block × Σ groups' pages
        return cache.request_bytes(length, in_flight_tokens(s, version))
    if s.state_page_bytes:
        return max(
            sum(1 for k in kinds if k in STATE_KINDS)
            for kinds in kvmath.stage_layer_kinds(kv_model, s.pipeline_parallel_size)
        ) * s.state_blocks * s.state_page_bytes
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
        state_blocks=s.state_blocks,
    )


def _largest_fitting_len(
    kv_model: ModelSpec, s: VllmSettings, available: int, upper: int, version: tuple[int, ...]
) -> int:
    """vLLM's `estimate_max_model_len`: binary search in [1, upper] for the largest length whose per-request
    KV fits `available` (`kv_cache_planning.py:97-148`); 0 when one token does not fit."""

    def needed(length: int) -> int:
        return _request_kv_bytes(kv_model, s, length, version)

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



def _conv_spec_columns(model: ModelSpec, settings: ServeSettings, version: str) -> int:
    """With `--speculative-config`, the conv states' extra columns (vramctl.core.engines.vllm_speculative)."""
    spec = SP.resolve_settings(model, version, settings)
    return spec.conv_columns if spec is not None else 0


def _ssm_cache_dtype(model: ModelSpec, settings: ServeSettings, version: str) -> str:
    """The flag wins; only `auto` goes through the model's hook (Nemotron-H's float32)."""
    if settings.mamba_ssm_cache_dtype not in (None, "", "auto"):
        return str(settings.mamba_ssm_cache_dtype)
    return V.default_mamba_ssm_cache_dtype(
        model.architecture, model.state_space.ssm_dtype if model.state_space else None, version
    )


def state_only_kv_for(
    model: ModelSpec, settings: ServeSettings, block_size: int, version: str
) -> kvmath.HybridKv:
    """The state page and block of a model without attention layers (`vramctl.core.kv.state_only_kv`)."""
    return kvmath.state_only_kv(
        model,
        block_size=block_size,
        tp=settings.tensor_parallel_size,
        model_dtype=compute_dtype(model, settings.dtype),
        mamba_cache_dtype=settings.mamba_cache_dtype or "auto",
        mamba_ssm_cache_dtype=_ssm_cache_dtype(model, settings, version),
        conv_spec_columns=_conv_spec_columns(model, settings, version),
    )


def resolved_mamba_cache_mode(model: ModelSpec, settings: ServeSettings, version: str) -> str:
    """A hybrid's mamba_cache_mode for these flags and this version (vramctl.core.mamba_cache); `--mamba-cache-mode`
    checked against the version's choices as vLLM's argument parser does."""
    rules = V.rules_for(version)
    requested = settings.mamba_cache_mode
    if requested is not None:
        requested = requested.strip().lower()
        if not rules.mamba_cache_modes:
            raise BadInputError(
                f"--mamba-cache-mode {requested}: vLLM {version} has no such flag (added in 0.15.0); vLLM would stop "
                "with 'unrecognized arguments'"
            )
        if requested not in rules.mamba_cache_modes:
            choices = ", ".join(repr(c) for c in rules.mamba_cache_modes)
            raise BadInputError(
                f"--mamba-cache-mode: invalid choice: {requested!r} (choose from {choices}) (vLLM {version}"
                + ("; mode 'all' was removed in 0.32)" if requested == "all" else ")")
            )
    if settings.mamba_block_size is not None and rules.mamba_state_blocks == "page":
        raise BadInputError(
            f"--mamba-block-size {settings.mamba_block_size}: vLLM {version} has no such flag (added in 0.12.0); "
            "vLLM would stop with 'unrecognized arguments'"
        )
    return mamba_cache.mamba_cache_mode(
        # attention-free models keep prefix caching off by default (ModelConfig.is_prefix_caching_supported)
        rules.hybrid_prefix_caching_default and not model.is_attention_free,
        settings.enable_prefix_caching,
        state_blocks_rule=rules.mamba_state_blocks,
        class_caches_all=model.state_space is not None and model.state_space.kind in ("mamba1", "mamba2"),
        speculative_align=settings.num_speculative_tokens > 0 and rules.speculative_mamba_align,
        requested=requested,
    )


def _all_mode_chunk(model: ModelSpec, settings: ServeSettings, version: str) -> int | None:
    """The chunk mode 'all' aligns the block to (`--mamba-block-size`, else the config's mamba chunk size); None in
    the other modes."""
    if model.is_state_only or resolved_mamba_cache_mode(model, settings, version) != "all":
        return None
    chunk = settings.mamba_block_size or (model.state_space.chunk_size if model.state_space else None)
    if not chunk:
        raise BadInputError(
            f"--mamba-cache-mode all: {model.name}'s config has no mamba chunk size (mamba_chunk_size / chunk_size), "
            "which vLLM aligns the block to (it asserts one); give --mamba-block-size"
        )
    return chunk


def hybrid_kv_for(model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, version: str) -> kvmath.HybridKv:
    """vLLM's page-size unification for this model, card and flags (`vramctl.core.kv.hybrid_kv`); with
    `--speculative-config` the conv states' extra columns (vramctl.core.engines.vllm_speculative); in mamba_cache_mode
    'all' the block aligned to the Mamba chunk."""
    return kvmath.hybrid_kv(
        model,
        mamba_chunk_size=_all_mode_chunk(model, settings, version),
        conv_spec_columns=_conv_spec_columns(model, settings, version),
        tp=settings.tensor_parallel_size,
        kv_cache_dtype=settings.kv_cache_dtype or "auto",
        model_dtype=compute_dtype(model, settings.dtype),
        user_block_size=settings.block_size,
        version=parse_version(version),
        compute_capability=gpu.compute_capability,
        mamba_cache_dtype=settings.mamba_cache_dtype or "auto",
        mamba_ssm_cache_dtype=_ssm_cache_dtype(model, settings, version),
    )
