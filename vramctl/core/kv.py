"""KV-cache geometry per attention kind, per rank: page sizes, bytes per block, blocks per request.

All of this follows vLLM's KV-cache spec objects (`vllm/v1/core/kv_cache_utils.py` (vLLM v0.33.0), vLLM 0.33.0):

- full attention (GQA / MHA): page = block_size × kv_heads_per_rank × head_dim × 2 (K and V) × dtype_bytes
  (`vllm/v1/kv_cache_interface.py:552-617`), kv_heads_per_rank = max(1, kv_heads // tp)
  (`vllm/config/model.py:1663-1683`);
- MLA: one latent of (kv_lora_rank + qk_rope_head_dim) per token and layer, no ×2, `max_tp_shards=1`, i.e.
  replicated on every TP rank (`kv_cache_interface.py:729-806`); `fp8_ds_mla` packs 656 B per token;
- sliding window: the same page, but a request holds at most
  cdiv(min(window − 1 + max_in_flight_tokens, max_model_len), block_size) + 1 blocks
  (`kv_cache_interface.py:901-966`);
- hybrid full + window: layers bucketed by kind, split into groups of equal layer count, one shared block
  pool; bytes_per_block = Σ pages of the layers of a group (the largest group), blocks per request =
  Σ over groups (`vllm/v1/core/kv_cache_planning.py:416-605`, `kv_cache_utils.py:1061-1154`);
- pipeline parallel: each stage holds `get_pp_indices` layers (`vllm/distributed/utils.py`: an even split,
  the remainder given to the stages from the second-to-last backwards); blocks are computed per rank and
  the minimum is taken (`kv_cache_planning.py:1580-1594`), so the stage with the largest block is binding.

Pure functions of a ModelSpec and a few flags; sizes are int bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vramctl.core.dsv4_cache import Dsv4Cache, dsv4_cache
from vramctl.core.engines.vllm.rules import HYBRID_MIN_VLLM as HYBRID_MIN_VLLM
from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.errors import BadInputError
from vramctl.core.gemma4_cache import Gemma4Cache, gemma4_cache
from vramctl.core.specs import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    STATE_KINDS,
    ModelSpec,
    dtype_bytes,
)
from vramctl.core.units import cdiv

# Packed per-token sizes of opaque MLA cache layouts (`mla_attention.py:1371-1401`, line 1386).
_MLA_PACKED_BYTES_PER_TOKEN: dict[str, int] = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}

# `--kv-cache-dtype` values and their element size (`vllm/utils/torch_utils.py:40-66`).
_KV_DTYPE_BYTES: dict[str, float] = {
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "int8": 1,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float32": 4,
    "fp32": 4,
    "nvfp4": 0.5,
    "nvfp4_4over6": 0.5,
    "int8_per_token_head": 1,
    "fp8_per_token_head": 1,
    "int4_per_token_head": 0.5,
}

_PER_TOKEN_HEAD_SCALE_BYTES = 4
"""`*_per_token_head`: one float32 scale per token, KV head and K / V side, stored in the page beside the data (vLLM
0.20.0 `AttentionSpec.page_size_bytes`, vllm/v1/kv_cache_interface.py:138-146, with the scale padded inline by
`TritonAttentionBackend.get_kv_cache_shape`, triton_attn.py:316-326; 0.32.0 `TritonAttentionBackend.customize_spec`,
vllm/v1/attention/backends/triton_attn.py:283-295: (K + V data) + 2 × 4 bytes per head and token)."""

_UNSIZED_KV_DTYPES: dict[str, str] = {
    "turboquant_": "TurboQuant packs K + V into one Lloyd-Max slot per head and keeps the first and last two attention "
    "layers of a dense model unquantised in padded pages (TurboQuantConfig, vllm/model_executor/layers/quantization/"
    "turboquant/config.py, 0.32.0)",
    "ultraquant_": "UltraQuant packs K + V into one FP4 / UE8M0 slot per head on its own 64-token block "
    "(vllm/v1/attention/backends/ultraquant_attn.py, 0.32.0)",
    "octave_": "the Octave layouts pack K + V per slot (vllm/config/cache.py CacheDType, 0.33.0)",
}
"""`--kv-cache-dtype` values vLLM accepts whose packed page vramctl does not size: refused in one line."""

KV_CACHE_DTYPES: tuple[str, ...] = ("auto", *_KV_DTYPE_BYTES, *_MLA_PACKED_BYTES_PER_TOKEN)

STATE_GROUP = "mamba"
"""KvGroup.kind of a hybrid's recurrent-state group (vLLM MambaSpec layers)."""
STATE_BLOCKS_PER_REQUEST = 1
"""Blocks one request holds in a MambaSpec group with mamba_cache_mode "none" and no speculative decoding:
`page × (1 + num_speculative_blocks)` (`vllm/v1/kv_cache_interface.py:1094-1160`, `vllm/v1/kv_cache_interface.py` (vLLM v0.33.0))."""

# Hybrid grouping: when the largest bucket has fewer than this many times the layers of the smallest,
# the group size is the largest bucket (fewer padding layers) (`kv_cache_planning.py:416-556`, 0.33.0).
_HYBRID_GROUP_RATIO = 1.5


def kv_dtype_bytes(
    model: ModelSpec, kv_cache_dtype: str = "auto", *, model_dtype: str | None = None
) -> float:
    """Bytes per cached element. `--kv-cache-dtype auto` = the dtype the model runs in (`vllm/config/cache.py:235`,
    `vllm/v1/kv_cache_interface.py` (vLLM v0.33.0)).

    `model_dtype` is the served `--dtype`. An explicit one is what the model runs (and caches) in: `--dtype
    float32` caches 4-byte elements. `auto` (or None) is the checkpoint's dtype, except that a float32 checkpoint
    is downcast to 16 bits (`_get_and_verify_dtype` in vllm/config.py, 0.6.x: "Following the common practice, we
    use float16 for float32 models"; later versions pick the platform's first supported 16-bit dtype,
    bfloat16): 2 bytes. vllm.md states only the `auto` = model dtype half of this rule.
    """
    key = kv_cache_dtype.strip().lower()
    if key == "auto":
        explicit = model_dtype is not None and model_dtype.strip().lower() not in ("auto", "")
        dtype = model_dtype if explicit else model.torch_dtype
        assert dtype is not None
        try:
            size = dtype_bytes(dtype)
        except KeyError:
            raise BadInputError(
                f"--dtype {dtype}: unknown model dtype (use auto, bfloat16, float16, float32)"
            ) from None
        return size if explicit else min(size, 2)
    if key in _MLA_PACKED_BYTES_PER_TOKEN:
        if not model.is_mla:
            raise BadInputError(
                f"--kv-cache-dtype {kv_cache_dtype}: only valid for MLA models, not {model.name}"
            )
        return 1
    for prefix, why in _UNSIZED_KV_DTYPES.items():
        if key.startswith(prefix) and key not in _KV_DTYPE_BYTES:
            raise BadInputError(
                f"--kv-cache-dtype {kv_cache_dtype}: vramctl does not size this packed KV cache yet ({why}); "
                "plan with fp8 or an nvfp4 / *_per_token_head dtype for a bound"
            )
    if key not in _KV_DTYPE_BYTES:
        raise BadInputError(
            f"--kv-cache-dtype {kv_cache_dtype!r}: unknown KV cache dtype (use one of {', '.join(KV_CACHE_DTYPES)})"
        )
    return _KV_DTYPE_BYTES[key]


def check_tensor_parallel(model: ModelSpec, tp: int) -> None:
    """The shapes vLLM and SGLang accept for `tp` ranks: attention heads split evenly, KV heads split or replicated
    evenly (vllm/model_executor/models/llama.py:147-156). BadInputError naming --tensor-parallel-size otherwise."""
    if tp < 1:
        raise BadInputError(f"--tensor-parallel-size {tp}: must be at least 1")
    if model.num_attention_heads % tp != 0:
        raise BadInputError(
            f"--tensor-parallel-size {tp}: Total number of attention heads ({model.num_attention_heads}) must be "
            f"divisible by tensor parallel size ({tp})."
        )
    kv_heads = model.num_key_value_heads
    if model.mla is None and kv_heads and (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
        raise BadInputError(
            f"--tensor-parallel-size {tp}: the model's {kv_heads} KV heads can be neither split evenly over nor "
            f"replicated evenly across {tp} ranks (vLLM asserts kv_heads % tp == 0 or tp % kv_heads == 0)"
        )


def kv_heads_per_rank(model: ModelSpec, tp: int = 1) -> int:
    """KV heads one TP rank holds: max(1, kv_heads // tp); MLA holds one latent on every rank."""
    if model.is_mla:
        return 1
    return max(1, model.num_key_value_heads // max(1, tp))


def token_bytes_per_layer(
    model: ModelSpec, *, kv_cache_dtype: str = "auto", tp: int = 1, model_dtype: str | None = None
) -> int:
    """Bytes one token occupies in one attention layer on one rank (the page for a block of 1)."""
    key = kv_cache_dtype.strip().lower()
    if model.mla is not None:
        indexer = model.mla.indexer_bytes_per_token
        if indexer and key.startswith("fp8"):
            # DeepSeek-V3.2: FLASHMLA_SPARSE serves any fp8 KV dtype in the packed fp8_ds_mla layout (512 fp8 + 4
            # float32 scales + 64 bf16 rope = 656 B; `_canonicalize_sparse_mla_kv_cache_dtype`,
            # vllm/model_executor/layers/attention/mla_attention.py, v0.32.0)
            key = "fp8_ds_mla"
        if key in _MLA_PACKED_BYTES_PER_TOKEN:
            return _MLA_PACKED_BYTES_PER_TOKEN[key] + indexer
        element = kv_dtype_bytes(model, kv_cache_dtype, model_dtype=model_dtype)
        # the indexer's K cache is a layer of its own (`DeepseekV32IndexerCache`: an MLAAttentionSpec of 132 uint8,
        # max_tp_shards 1) grouped with the MLA layers in one UniformTypeKVCacheSpecs, whose page is the sum of its
        # layers' pages (vllm/v1/kv_cache_interface.py, v0.32.0): latent + indexer per token and layer, every rank
        return int(model.mla.latent_dim * element) + indexer
    element = kv_dtype_bytes(model, kv_cache_dtype, model_dtype=model_dtype)
    return kv_heads_per_rank(model, tp) * packed_head_bytes(key, model.head_dim, element)


def packed_head_bytes(key: str, head_dim: int, element: float) -> int:
    """Bytes of one token's K and V for one KV head in a `--kv-cache-dtype key` cache:

    - `nvfp4` / `nvfp4_4over6`: per side head_dim / 2 bytes of FP4 data + one FP8 block scale per 16 values
      (`nvfp4_kv_cache_full_dim`, vllm/utils/torch_utils.py:556-558; `FlashInferBackend.customize_spec`,
      vllm/v1/attention/backends/flashinfer.py:433-445, 0.32.0; the same in 0.20.0 kv_cache_interface.py:255-266);
    - `int8_per_token_head` / `fp8_per_token_head`: one byte per value + a float32 scale per side;
      `int4_per_token_head`: half a byte per value + the same scales (`_PER_TOKEN_HEAD_SCALE_BYTES`);
    - any other: 2 × head_dim × the element size."""
    if key.startswith("nvfp4") and key != "nvfp4_ds_mla":
        return 2 * (head_dim // 2 + head_dim // 16)
    if key.endswith("_per_token_head"):
        return int(2 * head_dim * element) + 2 * _PER_TOKEN_HEAD_SCALE_BYTES
    return int(head_dim * 2 * element)


def page_size_bytes(
    model: ModelSpec,
    *,
    block_size: int,
    kv_cache_dtype: str = "auto",
    tp: int = 1,
    model_dtype: str | None = None,
) -> int:
    """One layer's page on one rank: block_size tokens (vLLM `AttentionSpec.page_size_bytes`)."""
    if block_size <= 0:
        raise BadInputError(f"--block-size {block_size}: must be a positive number of tokens")
    return block_size * token_bytes_per_layer(
        model, kv_cache_dtype=kv_cache_dtype, tp=tp, model_dtype=model_dtype
    )


def pp_partition(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage, as vLLM's `get_pp_indices` splits them (no VLLM_PP_LAYER_PARTITION).

    An even split; the remainder goes to the stages from the second-to-last backwards, e.g. 61 layers over
    4 stages → (15, 15, 16, 15), 22 over 4 → (5, 6, 6, 5).
    """
    if pp <= 0:
        raise BadInputError(f"--pipeline-parallel-size {pp}: must be at least 1")
    if pp > num_layers:
        raise BadInputError(
            f"--pipeline-parallel-size {pp}: more stages than the model's {num_layers} layers"
        )
    base = num_layers // pp
    parts = [base] * pp
    remainder = num_layers % pp
    for i in range(2, remainder + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_layer_kinds(model: ModelSpec, pp: int = 1) -> tuple[tuple[str, ...], ...]:
    """The attention kind of each layer, per pipeline stage."""
    kinds = model.attention_kinds()
    # a layer that runs attention and a state mixer side by side (Falcon-H1) lists both: vLLM's stages split
    # decoder layers, so each keeps its pair
    layers = model.num_hidden_layers
    per = len(kinds) // layers if layers and len(kinds) > layers and len(kinds) % layers == 0 else 1
    if pp > 1 and len(kinds) != layers * per:
        raise BadInputError(
            f"--pipeline-parallel-size {pp}: {model.name} runs attention beside the state mixer in some of its "
            f"{layers} layers only (Zamba2's hybrid layers); its stages are not modelled (plan it with pipeline "
            "parallelism 1)"
        )
    out: list[tuple[str, ...]] = []
    start = 0
    for count in pp_partition(len(kinds) // per, pp):
        out.append(tuple(kinds[start : start + count * per]))
        start += count * per
    return tuple(out)


@dataclass(frozen=True)
class KvGroup:
    """One KV-cache group of one rank: `num_layers` layers of one attention kind sharing block ids."""

    kind: str
    num_layers: int
    """Layers in the group, padding included (every group of a hybrid model has the same count)."""
    padding_layers: int = 0


@dataclass(frozen=True)
class StageLayout:
    """How one pipeline stage's layers map onto KV-cache groups."""

    num_full_layers: int
    num_sliding_layers: int
    groups: tuple[KvGroup, ...]
    num_state_layers: int = 0
    """Mamba2 / Gated DeltaNet layers (hybrids): one MambaSpec bucket beside the attention ones."""

    @property
    def group_size(self) -> int:
        return max((g.num_layers for g in self.groups), default=0)


def stage_layout(kinds: tuple[str, ...]) -> StageLayout:
    """vLLM's grouping of one rank's layers (`_get_kv_cache_groups_uniform_page_size`)."""
    n_full = sum(1 for k in kinds if k == FULL_ATTENTION)
    n_sw = sum(1 for k in kinds if k == SLIDING_ATTENTION)
    n_state = sum(1 for k in kinds if k in STATE_KINDS)
    pairs = ((FULL_ATTENTION, n_full), (SLIDING_ATTENTION, n_sw), (STATE_GROUP, n_state))
    buckets = [(kind, n) for kind, n in pairs if n > 0]
    if not buckets:
        return StageLayout(0, 0, (), n_state)
    if len(buckets) == 1:
        kind, n = buckets[0]
        return StageLayout(n_full, n_sw, (KvGroup(kind, n),), n_state)
    smallest = min(n for _, n in buckets)
    largest = max(n for _, n in buckets)
    group_size = largest if largest < smallest * _HYBRID_GROUP_RATIO else smallest
    groups: list[KvGroup] = []
    for kind, n in buckets:
        count = cdiv(n, group_size)
        for i in range(count):
            real = min(group_size, n - i * group_size)
            groups.append(KvGroup(kind, group_size, group_size - real))
    return StageLayout(n_full, n_sw, tuple(groups), n_state)


def own_layout_cache(
    model: ModelSpec, *, block_size: int | None = None, tp: int = 1, kv_cache_dtype: str = "auto"
) -> Dsv4Cache | Gemma4Cache | None:
    """The pool of a model whose cache layout vramctl sizes from its own module: DeepSeek-V4's packed pool
    (vramctl.core.dsv4_cache, replicated over TP) or Gemma-4's unified pages (vramctl.core.gemma4_cache); None for
    every other model. block_size None: the builder's default (DeepSeek-V4 256, Gemma-4 16)."""
    if model.dsv4 is not None:
        return dsv4_cache(model.dsv4, block_size=block_size, kv_cache_dtype=kv_cache_dtype)
    if model.gemma4 is not None:
        if block_size is None:
            return gemma4_cache(model.gemma4, tp=tp, kv_cache_dtype=kv_cache_dtype)
        return gemma4_cache(model.gemma4, block_size=block_size, tp=tp, kv_cache_dtype=kv_cache_dtype)
    return None


def kv_bytes_per_token(
    model: ModelSpec,
    *,
    kv_cache_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    model_dtype: str | None = None,
) -> int:
    """Bytes one more token of context costs on one rank of the worst stage.

    Counts the full-attention layers (sliding-window layers are capped per request; see
    `sliding_window_blocks_per_request`). A model whose every layer is windowed counts them all (a token
    costs that much until the window is full). Llama-3-8B bf16: 32 × 8 × 128 × 2 × 2 = 131,072.
    """
    if model.is_state_only:  # a fixed state per request, nothing per token
        return 0
    own = own_layout_cache(model, tp=tp, kv_cache_dtype=kv_cache_dtype)
    if own is not None:  # the pool's block over the tokens it holds (DeepSeek-V4: 256; Gemma-4: its full groups')
        return own.bytes_per_token()
    per_layer = token_bytes_per_layer(model, kv_cache_dtype=kv_cache_dtype, tp=tp, model_dtype=model_dtype)
    worst = 0
    for kinds in stage_layer_kinds(model, pp):
        n_full = sum(1 for k in kinds if k == FULL_ATTENTION)
        n = len(kinds) if model.num_full_layers == 0 else n_full
        worst = max(worst, n * per_layer)
    return worst


def bytes_per_block(
    model: ModelSpec,
    *,
    block_size: int,
    kv_cache_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    model_dtype: str | None = None,
) -> int:
    """One block id's bytes on one rank: Σ pages of the layers of a group, the largest stage.

    For a dense model this is num_layers_of_the_stage × page (Llama-3-8B, block 16: 32 × 65,536 = 2 MiB).
    DeepSeek-V4: the largest of its packed groups (vramctl.core.dsv4_cache; the same on every rank).
    """
    own = own_layout_cache(model, block_size=block_size, tp=tp, kv_cache_dtype=kv_cache_dtype)
    if own is not None:
        return own.bytes_per_block
    page = page_size_bytes(
        model, block_size=block_size, kv_cache_dtype=kv_cache_dtype, tp=tp, model_dtype=model_dtype
    )
    return max(stage_layout(kinds).group_size for kinds in stage_layer_kinds(model, pp)) * page


def max_in_flight_tokens(
    max_num_batched_tokens: int, *, version: tuple[int, ...], pp: int = 1, async_scheduling: bool = True
) -> int:
    """Tokens a sliding-window request may still need beyond its window (`vllm/config/vllm.py:588-609`).

    max_concurrent_batches × max_num_batched_tokens (`vllm/v1/kv_cache_interface.py` (vLLM v0.33.0)): with async scheduling that is pp + 1 batches
    on the V2 model runner (the default in 0.33), 2 on the V1 runner when pp = 1, and pp otherwise (V1 runs
    async scheduling only without pipeline parallelism). vramctl takes 0.33 as the first MRV2-default release
    and assumes async scheduling on in 0.12 – 0.32 (the reference pins neither boundary). 0.11.0 used
    max_num_batched_tokens itself. Without async scheduling (`--no-async-scheduling`, and always on vLLM's CPU
    backend: `vllm/platforms/cpu.py` turns it off) it is pp batches (`VllmConfig.max_concurrent_batches`, 0.32.0).
    """
    rule = rules_for(version).in_flight
    if rule == "batched-tokens":
        return max_num_batched_tokens
    if not async_scheduling:
        return pp * max_num_batched_tokens
    if rule == "pp-plus-one":
        return (pp + 1) * max_num_batched_tokens
    return (2 if pp == 1 else pp) * max_num_batched_tokens


def sliding_window_blocks_per_request(
    *, window: int, max_model_len: int, block_size: int, in_flight_tokens: int
) -> int:
    """vLLM `SlidingWindowSpec.max_memory_usage_bytes` / page: the +1 covers a window starting mid-block."""
    return cdiv(min(window - 1 + in_flight_tokens, max_model_len), block_size) + 1


def blocks_per_request(
    model: ModelSpec,
    *,
    max_model_len: int,
    block_size: int,
    max_num_batched_tokens: int,
    version: tuple[int, ...],
    pp: int = 1,
    async_scheduling: bool = True,
    state_blocks: int = STATE_BLOCKS_PER_REQUEST,
) -> int:
    """Block ids one max_model_len request takes from the shared pool, on the binding (largest) stage.

    Σ over the stage's groups: a full group takes cdiv(max_model_len, block_size), a window group its cap.
    """
    full = cdiv(max_model_len, block_size)
    in_flight = max_in_flight_tokens(
        max_num_batched_tokens, version=version, pp=pp, async_scheduling=async_scheduling
    )
    window = model.sliding_window
    sw = (
        sliding_window_blocks_per_request(
            window=window, max_model_len=max_model_len, block_size=block_size, in_flight_tokens=in_flight
        )
        if window is not None
        else full
    )
    layouts = [stage_layout(kinds) for kinds in stage_layer_kinds(model, pp)]
    binding = max(layouts, key=lambda lay: lay.group_size)
    # A state group holds one block per request (MambaSpec, mamba_cache_mode "none": see hybrid_kv), two in the
    # "align" mode of prefix caching (`state_blocks`, vramctl/core/mamba_cache.py).
    per_group = {FULL_ATTENTION: full, SLIDING_ATTENTION: sw, STATE_GROUP: state_blocks}
    return sum(per_group[g.kind] for g in binding.groups)


def per_request_kv_bytes(
    model: ModelSpec,
    *,
    max_model_len: int,
    block_size: int,
    max_num_batched_tokens: int,
    version: tuple[int, ...],
    kv_cache_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    model_dtype: str | None = None,
    async_scheduling: bool = True,
    state_blocks: int = STATE_BLOCKS_PER_REQUEST,
) -> int:
    """Bytes one request of `max_model_len` tokens needs on the binding rank: vLLM's `needed` in the
    "To serve at least one request…" check, Σ over the real (unpadded) layers of each layer's
    `max_memory_usage_bytes` (`kv_cache_planning.py:66-87`)."""
    page = page_size_bytes(
        model, block_size=block_size, kv_cache_dtype=kv_cache_dtype, tp=tp, model_dtype=model_dtype
    )
    full = cdiv(max_model_len, block_size)
    window = model.sliding_window
    sw = full
    if window is not None:
        in_flight = max_in_flight_tokens(
            max_num_batched_tokens, version=version, pp=pp, async_scheduling=async_scheduling
        )
        sw = sliding_window_blocks_per_request(
            window=window, max_model_len=max_model_len, block_size=block_size, in_flight_tokens=in_flight
        )
    worst = 0
    for kinds in stage_layer_kinds(model, pp):
        n_full = sum(1 for k in kinds if k == FULL_ATTENTION)
        n_state = sum(1 for k in kinds if k in STATE_KINDS)
        n_sw = sum(1 for k in kinds if k == SLIDING_ATTENTION) if model.state_space else len(kinds) - n_full
        # A Mamba layer's max_memory_usage_bytes is its (padded) page × 1 (see hybrid_kv), × 2 in "align" mode.
        worst = max(worst, (n_full * full + n_sw * sw + n_state * state_blocks) * page)
    return worst


# --- hybrid attention + Mamba2 / Gated DeltaNet models (vLLM V1; docs/hybrid.md) --------------------------------
#
# Sources (vLLM; the file paths are those of the versions named, read with the search tools, see docs/hybrid.md):
# - state shapes: `vllm/model_executor/layers/mamba/mamba_utils.py` MambaStateShapeCalculator.mamba2_state_shape
#   (conv (conv_dim / tp, kernel − 1), SSM (heads / tp, head_dim, state); n_groups padded to tp when tp does not
#   divide it, `extra_groups_for_head_shards`) and `.gated_delta_net_state_shape` (conv over 2·k_heads·k_dim +
#   v_heads·v_dim channels, state (v_heads / tp, v_dim, k_dim)); each model's `get_mamba_state_shape_from_config`
#   (qwen3_next.py, nemotron_h.py: intermediate = mamba_num_heads × mamba_head_dim, granitemoehybrid.py:
#   intermediate = mamba_expand × hidden_size);
# - dtypes: MambaStateDtypeCalculator._mamba_state_dtype: conv = `--mamba-cache-dtype` (auto = the model dtype),
#   SSM = `--mamba-ssm-cache-dtype` (auto = the conv dtype);
# - page: MambaSpec.page_size_bytes = Σ prod(shape) × dtype size, or page_size_padded (`vllm/v1/kv_cache_interface.py` (vLLM v0.33.0));
# - block size: HybridAttentionMambaModelConfig.verify_and_update_config (`vllm/model_executor/models/config.py`,
#   0.10.2 – 0.11) and Platform._align_hybrid_block_size (`vllm/platforms/interface.py:940-1140`, 0.33.0):
#   attn_block = align × cdiv(mamba_page, align × attn_page_1_token), raised only when the block size is smaller;
#   the mamba page is then padded to block × attn_page_1_token ("Padding mamba page size by %.2f%%");
# - groups and blocks: `_get_kv_cache_groups_uniform_page_size` (one bucket per spec, equal-size groups, see
#   stage_layout), num_blocks = available // (group_size × page) (kv_cache_planning.py:574-605, 681-682),
#   max_concurrency = num_blocks / Σ groups' blocks per request (kv_cache_utils.py:1061-1154).

# HYBRID_MIN_VLLM (the first vLLM whose hybrids vramctl plans) lives with the other switches in
# vramctl.core.engines.vllm.rules; imported above for the old path.

MLA_HYBRID_ALIGNMENT = 128
"""The block alignment of an MLA + state hybrid (see `hybrid_block_alignment`)."""
_MAMBA_DTYPES: dict[str, float] = {"auto": 0, "float32": 4, "bfloat16": 2, "float16": 2, "fp32": 4, "bf16": 2}


@dataclass(frozen=True)
class StateShapes:
    """One state layer's tensors on one TP rank (elements) and their element sizes."""

    conv: tuple[int, int]
    ssm: tuple[int, ...]
    """(heads, head_dim, state); Mamba1 (Jamba): (width, state)."""
    conv_dtype_bytes: float
    ssm_dtype_bytes: float

    @property
    def conv_bytes(self) -> int:
        return int(self.conv[0] * self.conv[1] * self.conv_dtype_bytes)

    @property
    def ssm_bytes(self) -> int:
        return int(math.prod(self.ssm) * self.ssm_dtype_bytes) if self.ssm else 0

    @property
    def page_bytes(self) -> int:
        """MambaSpec.page_size_bytes before padding: conv + SSM state of one layer, one request, one rank."""
        return self.conv_bytes + self.ssm_bytes


def _state_dtype_bytes(name: str, flag: str, fallback: float) -> float:
    key = name.strip().lower().removeprefix("torch.")
    if key not in _MAMBA_DTYPES:
        raise BadInputError(f"{flag} {name}: unknown state dtype (use auto, float32, bfloat16, float16)")
    size = _MAMBA_DTYPES[key]
    return fallback if size == 0 else size


def _kda_recurrent_bytes(flag: str) -> float:
    """`MambaStateDtypeCalculator.kda_state_dtype` (vllm/model_executor/layers/mamba/mamba_utils.py, v0.32.0): the
    KDA recurrent state is float32 under `auto` (every release since Kimi-Linear's first kept it float32),
    float32 or bfloat16 when asked for; anything else is vLLM's ValueError."""
    key = flag.strip().lower().removeprefix("torch.")
    if key in ("auto", "float32", "fp32"):
        return 4
    if key in ("bfloat16", "bf16"):
        return 2
    raise BadInputError(
        f"--mamba-ssm-cache-dtype {flag}: KDA recurrent state supports only auto, float32, and bfloat16 "
        "(vLLM's kda_state_dtype)"
    )


def state_shapes(
    model: ModelSpec,
    *,
    tp: int = 1,
    element_bytes: float = 2,
    mamba_cache_dtype: str = "auto",
    mamba_ssm_cache_dtype: str = "auto",
    conv_spec_columns: int = 0,
) -> StateShapes:
    """vLLM's per-rank state of one Mamba2 / Gated DeltaNet layer (see the sources above).

    `element_bytes`: the model dtype's size (`auto` state dtypes follow it). Qwen3-Next at TP 4, bf16: conv
    (8192 / 4, 3) → 6,144 elements × 2 = 12,288 B; SSM (32 / 4, 128, 128) → 131,072 × 2 = 262,144 B.
    """
    st = model.state_space
    if st is None:
        raise BadInputError(f"{model.name}: not a hybrid model with Mamba / linear-attention state")
    conv_bytes = _state_dtype_bytes(mamba_cache_dtype, "--mamba-cache-dtype", element_bytes)
    ssm_bytes = _state_dtype_bytes(mamba_ssm_cache_dtype, "--mamba-ssm-cache-dtype", conv_bytes)
    if st.kind == "kda":
        ssm_bytes = _kda_recurrent_bytes(mamba_ssm_cache_dtype)
    groups = st.n_groups
    if st.kind == "mamba2" and groups % tp:
        groups += tp - groups  # extra_groups_for_head_shards: replicate groups to follow the head shards
    conv_dim = st.intermediate_size + 2 * groups * st.state_size
    for what, total in (("conv channels", conv_dim), ("state heads", st.num_heads)):
        if total % tp:
            raise BadInputError(
                f"--tensor-parallel-size {tp}: the model's {total} {what} of its state layers do not split evenly "
                f"over {tp} ranks (vLLM's divide() asserts it)"
            )
    ssm: tuple[int, ...] = (st.num_heads // tp, st.head_dim, st.state_size)
    if st.kind == "mamba1":  # `mamba1_state_shape`: (intermediate / tp, state_size)
        ssm = (st.intermediate_size // tp, st.state_size)
    elif st.kind == "short_conv":  # `short_conv_state_shape`: the conv state only
        ssm = ()
    return StateShapes(
        # `conv_kernel - 1 + num_spec` with speculative decoding (`conv_spec_columns`; vramctl.core.engines.vllm_speculative)
        conv=(conv_dim // tp, st.conv_kernel - 1 + conv_spec_columns),
        ssm=ssm,
        conv_dtype_bytes=conv_bytes,
        ssm_dtype_bytes=ssm_bytes,
    )


def hybrid_block_alignment(
    model: ModelSpec, *, version: tuple[int, ...], user_block_size: int | None, compute_capability: str | None
) -> int:
    """The attention kernel block alignment vLLM rounds the hybrid block size to.

    16 (FlashAttention / FlashInfer / Triton accept multiples of 16); 32 on compute capability 10.x with head_dim
    256 under FlashInfer ("head size 256 and block size 16 is not supported on blackwell", config.py from 0.11);
    from 0.12 `_align_hybrid_block_size` also takes max(alignment, cache_config.block_size), so a larger user
    --block-size becomes the alignment (0.12 is vramctl's reading of when interface.py took this over), and so does
    0.34's default block of 64.
    """
    align = 16
    rules = rules_for(version)
    if (
        rules.hybrid_align_blackwell_256
        and compute_capability is not None
        and compute_capability.split(".")[0] == "10"
        and model.head_dim == 256
    ):
        align = 32
    if rules.hybrid_align_user_block:
        # cache_config.block_size: the user's, else the release's default (64 from 0.34, `vllm/config/cache.py:185`
        # (0.34.0); `kernel_block_alignment_size = max(..., cache_config.block_size)`,
        # `vllm/platforms/interface.py:1079-1086` (0.34.0))
        align = max(align, user_block_size if user_block_size is not None else rules.block_size_default)
    if model.is_mla:
        # "TRTLLM/FlashInfer MLA decode kernels require the physical number of kernel blocks to be aligned to
        # 128 / kernel_block_size": an MLA hybrid (Kimi-Linear) aligns to at least 128 (`_align_hybrid_block_size`,
        # vllm/platforms/interface.py:1077-1082 at v0.32.0; applied to every version vramctl plans hybrids for)
        align = max(align, MLA_HYBRID_ALIGNMENT)
    return align


@dataclass(frozen=True)
class HybridKv:
    """vLLM's page-size unification for one hybrid model on one TP rank."""

    shapes: StateShapes
    attention_token_bytes: int
    """FullAttentionSpec(block_size=1).page_size_bytes: kv_heads_per_rank × head_dim × 2 × kv dtype."""
    state_page_bytes: int
    """The unpadded mamba page (one layer, one request)."""
    alignment: int
    minimum_block_size: int
    """align × cdiv(mamba page, align × attention page of one token)."""
    block_size: int
    """The attention block size vLLM runs with (the minimum, or a larger --block-size)."""
    block_size_raised: bool
    """vLLM logs "Setting attention block size to N tokens …" (the block size was unset or smaller)."""
    attention_free: bool = False
    """No attention layer (`state_only_kv`): no attention page, the page is the unpadded state, `block_size` is the
    mamba block size."""

    @property
    def page_bytes(self) -> int:
        """Every layer's page: block_size × attention bytes per token = the padded mamba page (attention-free: the
        state page itself)."""
        if self.attention_free:
            return self.state_page_bytes
        return self.block_size * self.attention_token_bytes

    @property
    def padding_pct(self) -> float:
        """vLLM's "Padding mamba page size by %.2f%%" value (0 when the pages are already equal)."""
        return 100 * (self.page_bytes - self.state_page_bytes) / self.state_page_bytes

    def to_json(self) -> dict[str, object]:
        return {
            "conv_state_shape": list(self.shapes.conv),
            "ssm_state_shape": list(self.shapes.ssm),
            "conv_state_dtype_bytes": self.shapes.conv_dtype_bytes,
            "ssm_state_dtype_bytes": self.shapes.ssm_dtype_bytes,
            "state_page_bytes": self.state_page_bytes,
            "attention_token_bytes": self.attention_token_bytes,
            "block_alignment": self.alignment,
            "attention_block_size": self.block_size,
            "block_size_raised": self.block_size_raised,
            "page_bytes": self.page_bytes,
            "mamba_page_padding_pct": round(self.padding_pct, 2),
        }


def hybrid_kv(
    model: ModelSpec,
    *,
    tp: int = 1,
    kv_cache_dtype: str = "auto",
    model_dtype: str | None = None,
    user_block_size: int | None = None,
    version: tuple[int, ...] = (0, 33, 0),
    compute_capability: str | None = None,
    mamba_cache_dtype: str = "auto",
    mamba_ssm_cache_dtype: str = "auto",
    conv_spec_columns: int = 0,
    mamba_chunk_size: int | None = None,
) -> HybridKv:
    """The attention block size and page every layer of a hybrid shares on one rank. `mamba_chunk_size`: mode 'all'
    (vramctl.core.mamba_cache) aligns the block to lcm(chunk, alignment) instead of the alignment
    (`_align_hybrid_block_size`, `[0.20.2] vllm/platforms/interface.py:585-595`).

    Worked example, Qwen3-Next-80B-A3B at TP 4 in bf16: attention page per token = max(1, 2 // 4) × 256 × 2 × 2
    = 1,024 B; mamba page = 12,288 + 262,144 = 274,432 B; block = 16 × cdiv(274,432, 16 × 1,024) = 16 × 17 = 272
    tokens; page = 272 × 1,024 = 278,528 B; padding (278,528 − 274,432) / 274,432 = 1.49 %.
    """
    token = token_bytes_per_layer(model, kv_cache_dtype=kv_cache_dtype, tp=tp, model_dtype=model_dtype)
    element = kv_dtype_bytes(model, "auto", model_dtype=model_dtype)
    shapes = state_shapes(
        model,
        tp=tp,
        element_bytes=element,
        mamba_cache_dtype=mamba_cache_dtype,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
        conv_spec_columns=conv_spec_columns,
    )
    mamba_page = shapes.page_bytes
    align = hybrid_block_alignment(
        model, version=version, user_block_size=user_block_size, compute_capability=compute_capability
    )
    minimum = align * cdiv(mamba_page, align * token)
    if mamba_chunk_size is not None:
        chunk = math.lcm(mamba_chunk_size, align)
        minimum = chunk * cdiv(cdiv(mamba_page, token), chunk)
    current = user_block_size if user_block_size is not None else rules_for(version).block_size_default
    raised = user_block_size is None or current < minimum
    block = minimum if raised else current
    return HybridKv(shapes, token, mamba_page, align, minimum, block, raised)


def state_only_kv(
    model: ModelSpec,
    *,
    block_size: int,
    tp: int = 1,
    model_dtype: str | None = None,
    mamba_cache_dtype: str = "auto",
    mamba_ssm_cache_dtype: str = "auto",
    conv_spec_columns: int = 0,
) -> HybridKv:
    """The pool of a model with state layers and no attention layer (vLLM V1): no attention page to unify with, so
    the page is one layer's unpadded state and the MambaSpec block size is `cache_config.mamba_block_size`.
    `MambaModelConfig.verify_and_update_config` (vllm/model_executor/models/config.py, v0.32.0) sets it to
    max_model_len with prefix caching off (always, by default, for the attention-free Mamba / Mamba2 /
    FalconMamba) and to the cache block size with prefix caching on (an all-Mamba Granite-4.0-H, an `IsHybrid` class,
    from 0.28); `MambaBase.get_kv_cache_spec` (vllm/model_executor/layers/mamba/abstract.py) builds the spec from it,
    and the engine reports it (`cache_config.block_size = min(group block sizes)`, vllm/v1/engine/core.py). Checked
    on the CPU build (tests/engine/cases.yaml `mamba2-pure-default`, `mamba1-pure-default`,
    `granite-4-h-all-mamba-default`)."""
    element = kv_dtype_bytes(model, "auto", model_dtype=model_dtype)
    shapes = state_shapes(
        model,
        tp=tp,
        element_bytes=element,
        mamba_cache_dtype=mamba_cache_dtype,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
        conv_spec_columns=conv_spec_columns,
    )
    return HybridKv(shapes, 0, shapes.page_bytes, 0, block_size, block_size, False, attention_free=True)


def state_bytes_per_request(
    model: ModelSpec, hkv: HybridKv, *, pp: int = 1, state_blocks: int = STATE_BLOCKS_PER_REQUEST
) -> tuple[int, int]:
    """(unpadded, padded) state bytes one request holds on one rank of the stage with the most state layers."""
    layers = max(sum(1 for k in kinds if k in STATE_KINDS) for kinds in stage_layer_kinds(model, pp))
    return (
        layers * hkv.state_page_bytes * state_blocks,
        layers * hkv.page_bytes * state_blocks,
    )
