"""KV-cache geometry per attention kind, per rank: page sizes, bytes per block, blocks per request.

All of this follows vLLM's KV-cache spec objects (../shared/reference/vllm.md §3, vLLM 0.33.0):

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

from dataclasses import dataclass

from vramctl.core.errors import BadInputError
from vramctl.core.specs import FULL_ATTENTION, SLIDING_ATTENTION, ModelSpec, dtype_bytes
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
}

KV_CACHE_DTYPES: tuple[str, ...] = ("auto", *_KV_DTYPE_BYTES, *_MLA_PACKED_BYTES_PER_TOKEN)

# Hybrid grouping: when the largest bucket has fewer than this many times the layers of the smallest,
# the group size is the largest bucket (fewer padding layers) (`kv_cache_planning.py:416-556`, 0.33.0).
_HYBRID_GROUP_RATIO = 1.5


def kv_dtype_bytes(
    model: ModelSpec, kv_cache_dtype: str = "auto", *, model_dtype: str | None = None
) -> float:
    """Bytes per cached element. `--kv-cache-dtype auto` = the dtype the model runs in (`vllm/config/cache.py:235`,
    vllm.md §3.3).

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
        if key in _MLA_PACKED_BYTES_PER_TOKEN:
            return _MLA_PACKED_BYTES_PER_TOKEN[key]
        element = kv_dtype_bytes(model, kv_cache_dtype, model_dtype=model_dtype)
        return int(model.mla.latent_dim * element)
    element = kv_dtype_bytes(model, kv_cache_dtype, model_dtype=model_dtype)
    return int(kv_heads_per_rank(model, tp) * model.head_dim * 2 * element)


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
    out: list[tuple[str, ...]] = []
    start = 0
    for count in pp_partition(len(kinds), pp):
        out.append(tuple(kinds[start : start + count]))
        start += count
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

    @property
    def group_size(self) -> int:
        return max((g.num_layers for g in self.groups), default=0)


def stage_layout(kinds: tuple[str, ...]) -> StageLayout:
    """vLLM's grouping of one rank's layers (`_get_kv_cache_groups_uniform_page_size`)."""
    n_full = sum(1 for k in kinds if k == FULL_ATTENTION)
    n_sw = sum(1 for k in kinds if k == SLIDING_ATTENTION)
    buckets = [(kind, n) for kind, n in ((FULL_ATTENTION, n_full), (SLIDING_ATTENTION, n_sw)) if n > 0]
    if not buckets:
        return StageLayout(0, 0, ())
    if len(buckets) == 1:
        kind, n = buckets[0]
        return StageLayout(n_full, n_sw, (KvGroup(kind, n),))
    smallest = min(n for _, n in buckets)
    largest = max(n for _, n in buckets)
    group_size = largest if largest < smallest * _HYBRID_GROUP_RATIO else smallest
    groups: list[KvGroup] = []
    for kind, n in buckets:
        count = cdiv(n, group_size)
        for i in range(count):
            real = min(group_size, n - i * group_size)
            groups.append(KvGroup(kind, group_size, group_size - real))
    return StageLayout(n_full, n_sw, tuple(groups))


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
    """
    page = page_size_bytes(
        model, block_size=block_size, kv_cache_dtype=kv_cache_dtype, tp=tp, model_dtype=model_dtype
    )
    return max(stage_layout(kinds).group_size for kinds in stage_layer_kinds(model, pp)) * page


def max_in_flight_tokens(max_num_batched_tokens: int, *, version: tuple[int, ...], pp: int = 1) -> int:
    """Tokens a sliding-window request may still need beyond its window (`vllm/config/vllm.py:588-609`).

    max_concurrent_batches × max_num_batched_tokens (vllm.md §3.1): with async scheduling that is pp + 1 batches
    on the V2 model runner (the default in 0.33), 2 on the V1 runner when pp = 1, and pp otherwise (V1 runs
    async scheduling only without pipeline parallelism). vramctl takes 0.33 as the first MRV2-default release
    and assumes async scheduling on in 0.12 – 0.32 (the reference pins neither boundary). 0.11.0 used
    max_num_batched_tokens itself.
    """
    if version <= (0, 11, 99):
        return max_num_batched_tokens
    if version >= (0, 33, 0):
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
) -> int:
    """Block ids one max_model_len request takes from the shared pool, on the binding (largest) stage.

    Σ over the stage's groups: a full group takes cdiv(max_model_len, block_size), a window group its cap.
    """
    full = cdiv(max_model_len, block_size)
    in_flight = max_in_flight_tokens(max_num_batched_tokens, version=version, pp=pp)
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
    return sum(full if g.kind == FULL_ATTENTION else sw for g in binding.groups)


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
        in_flight = max_in_flight_tokens(max_num_batched_tokens, version=version, pp=pp)
        sw = sliding_window_blocks_per_request(
            window=window, max_model_len=max_model_len, block_size=block_size, in_flight_tokens=in_flight
        )
    worst = 0
    for kinds in stage_layer_kinds(model, pp):
        n_full = sum(1 for k in kinds if k == FULL_ATTENTION)
        n_sw = len(kinds) - n_full
        worst = max(worst, (n_full * full + n_sw * sw) * page)
    return worst
