"""DeepSeek-V4's KV cache as vLLM 0.32.0 allocates it: five kinds of per-layer cache, packed side by side in one pool.

Every term below is read from vLLM 0.32.0's source (paths relative to `vllm/`):

- Layer kinds come from `compress_ratios[layer]` (`models/deepseek_v4/attention.py:233`: max(1, ratio); the
  trailing entry past num_hidden_layers is the MTP layer's): 1 = sliding window only, 4 = C4A (compressed sparse
  attention, with an indexer, `attention.py:298`), 128 = C128A (heavily compressed attention).
- Sliding-window cache, every layer (`attention.py:345`, `v1/attention/backends/mla/sparse_swa.py:74-135`):
  `SlidingWindowMLASpec`, block 64 tokens (`sparse_swa.py:83`), window = `sliding_window`, 584 B per token in the
  fp8_ds_mla layout (448 B NoPE + 128 B RoPE + 8 B scales, `sparse_swa.py:84`).
- Compressed MLA cache, C4A / C128A layers (`attention.py:856-879`): `MLAAttentionSpec` with the cache block size
  and `tokens_per_state` = the ratio: block // ratio states of 584 B (`v1/kv_cache_interface.py:228-234, 545-550`).
- Compressor state, C4A / C128A layers (`models/deepseek_v4/compressor.py:139-194`): a float32
  `SlidingWindowMLASpec` of 2 × coff × head_dim values per token (coff = 2 for ratio 4, else 1,
  `compressor.py:159, 283`), window coff × ratio, block 4 tokens (ratio 4) or 8 (ratio 128) (`compressor.py:169-171`).
- Indexer, C4A layers (`attention.py:1008-1027`): a K cache `MLAAttentionSpec` of index_head_dim + 4 B per state
  (fp8 + one float32 scale per 128 values: 132 B; MXFP4 68 B) with tokens_per_state 4 (`attention.py:907-921`), and
  its own compressor (head_dim = index_head_dim) with a compressor state as above.
- Every page is rounded up to its `alignment` (576 B in the fp8_ds_mla layout, else 512;
  `kv_cache_interface.py:676-683`). Head counts are 1 and `max_tp_shards=1`: every TP rank holds the whole cache.
- Block size: the sparse MLA and indexer backends accept only 256 (`models/deepseek_v4/sparse_mla.py:61`,
  `v1/attention/backends/mla/indexer.py:356`), the SWA backend multiples of 32 (`sparse_swa.py:155`): the common
  size is 256 (`platforms/interface.py:700-745`); a --block-size must be a multiple of 256.
- Grouping: the indexer needs a block-outermost layout (`indexer.py:351`), so the mixed page sizes are packed by
  `_get_packed_kv_cache_groups` (`v1/core/kv_cache_utils.py:1860-1995`, ported in `packed_groups`); the pool is
  num_blocks = available // bytes_per_block, bytes_per_block = the largest group's Σ pages
  (`kv_cache_utils.py:1520-1551, 1623`); one request takes, from every group, the pages its widest layer needs
  (`kv_cache_utils.py:1195-1227`; a window layer cdiv(min(window − 1 + in-flight, len), block) + 1,
  `kv_cache_interface.py:858-885`).

Pure: no torch. Sizes are int bytes.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass

from vramctl.core.dsv4 import Dsv4Shape
from vramctl.core.errors import BadInputError
from vramctl.core.units import cdiv

DSV4_BLOCK_SIZE = 256
"""The one block size every DeepSeek-V4 backend accepts (sparse MLA and indexer: [256])."""
SWA_BLOCK_SIZE = 64
PACKED_BYTES_PER_TOKEN = 584
"""fp8_ds_mla: 448 B NoPE + 128 B RoPE + 8 B UE8M0 scales per token (attention.py:876-878)."""
FP8_DS_MLA_ALIGNMENT = 576
PLAIN_ALIGNMENT = 512
FP8_INDEXER_BYTES = 4
"""One float32 scale per 128-value quant block of the fp8 indexer key (attention.py:1012-1015)."""

FULL = "full"
WINDOW = "window"


@dataclass(frozen=True)
class CacheLayer:
    """One cache vLLM allocates (a `KVCacheSpec`): its block, page and window."""

    name: str
    kind: str
    """`full` (MLAAttentionSpec: a page per block of tokens, for the whole length) or `window`
    (SlidingWindowMLASpec: pages for the window plus the tokens in flight)."""
    block_size: int
    page_bytes: int
    window: int = 0
    unpadded_bytes: int = 0
    tokens_per_state: int = 1


def _aligned(size: int, alignment: int) -> int:
    return cdiv(size, alignment) * alignment


def resolve_cache_dtype(kv_cache_dtype: str) -> str:
    """The FlashMLA backend (the default on every CUDA card but SM 12.x) stores the fp8_ds_mla layout whatever fp8
    flavour is asked for, and refuses a 16-bit cache (`_resolve_dsv4_kv_cache_dtype`, attention.py:93-128)."""
    key = (kv_cache_dtype or "auto").lower()
    if key == "auto" or key.startswith("fp8"):
        return "fp8_ds_mla"
    raise BadInputError(
        f"--kv-cache-dtype {kv_cache_dtype}: DeepSeek-V4's FlashMLA backend needs an fp8 KV cache (vLLM stops: "
        "'requires an fp8 kv-cache'); use --kv-cache-dtype fp8 (or auto)"
    )


def cache_layers(
    attn: Dsv4Shape, *, block_size: int = DSV4_BLOCK_SIZE, indexer_fp4: bool = False
) -> tuple[CacheLayer, ...]:
    """Every cache of the model in vLLM's registration order (the indexer's inside the attention's constructor,
    then the sliding window, the attention itself, its compressor), fp8_ds_mla layout."""
    if block_size % DSV4_BLOCK_SIZE:
        raise BadInputError(
            f"--block-size {block_size}: DeepSeek-V4's sparse MLA and indexer kernels take only multiples of "
            f"{DSV4_BLOCK_SIZE} (vLLM: 'share no supported KV cache block size'); drop the flag or use 256"
        )
    align = FP8_DS_MLA_ALIGNMENT
    index_bytes = (
        attn.index_head_dim // 2 + attn.index_head_dim // 32
        if indexer_fp4
        else attn.index_head_dim + attn.index_head_dim // 128 * FP8_INDEXER_BYTES
    )
    out: list[CacheLayer] = []

    def add(name: str, kind: str, block: int, unpadded: int, window: int = 0, per_state: int = 1) -> None:
        out.append(CacheLayer(name, kind, block, _aligned(unpadded, align), window, unpadded, per_state))

    def state(name: str, ratio: int, head_dim: int) -> None:
        coff = 1 + (ratio == 4)
        block = 4 if ratio == 4 else 8
        add(name, WINDOW, block, block * 2 * coff * head_dim * 4, coff * ratio)

    for i, ratio in enumerate(attn.compress_ratios):
        p = f"layers.{i}.attn"
        if ratio == 4:
            add(f"{p}.indexer.k_cache", FULL, block_size, block_size // 4 * index_bytes, per_state=4)
            state(f"{p}.indexer.compressor.state_cache", 4, attn.index_head_dim)
        add(f"{p}.swa_cache", WINDOW, SWA_BLOCK_SIZE, SWA_BLOCK_SIZE * PACKED_BYTES_PER_TOKEN, attn.sliding_window)
        if ratio > 1:
            add(p, FULL, block_size, block_size // ratio * PACKED_BYTES_PER_TOKEN, per_state=ratio)
            state(f"{p}.compressor.state_cache", ratio, attn.head_dim)
        elif ratio != 1:
            raise BadInputError(f"compress_ratios[{i}] = {ratio}: vLLM 0.32.0 serves ratios 1, 4 and 128 only")
    return tuple(out)


@dataclass(frozen=True)
class CacheGroup:
    """One KV cache group: layers sharing a block table, each block of the shared pool holding one page of each."""

    layers: tuple[CacheLayer, ...]

    @property
    def page_bytes(self) -> int:
        return sum(layer.page_bytes for layer in self.layers)

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        """The pages its widest layer needs for one request of max_model_len (`max_memory_usage_pages`)."""
        return max(_layer_blocks(layer, max_model_len, in_flight_tokens) for layer in self.layers)


def _layer_blocks(layer: CacheLayer, max_model_len: int, in_flight_tokens: int) -> int:
    if layer.kind == FULL:
        return cdiv(max_model_len, layer.block_size)
    return cdiv(min(layer.window - 1 + in_flight_tokens, max_model_len), layer.block_size) + 1


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """`_approximate_gcd` (kv_cache_utils.py:1825-1857): the chunk in [lower_bound, max] with the least padding,
    ties to the larger."""
    best, best_pad = lower_bound, -1
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad < 0 or pad <= best_pad:
            best, best_pad = d, pad
    return best


def _buckets(layers: tuple[CacheLayer, ...]) -> list[list[CacheLayer]]:
    """Greedy uniform-type buckets: one block size and, for window layers, one window (`is_uniform_type`)."""
    buckets: list[list[CacheLayer]] = []
    for layer in layers:
        for bucket in buckets:
            first = bucket[0]
            if (first.block_size, first.kind, first.window) == (layer.block_size, layer.kind, layer.window):
                bucket.append(layer)
                break
        else:
            buckets.append([layer])
    return buckets


def packed_groups(layers: tuple[CacheLayer, ...]) -> tuple[CacheGroup, ...]:
    """vLLM's `_get_packed_kv_cache_groups` (kv_cache_utils.py:1860-1995) for mixed page sizes: buckets whose page
    sizes repeat 1:1 split into groups of `repeats` pattern repeats (`_approximate_gcd`, lower bound the largest
    mixed balanced bucket); other buckets stay whole. DeepSeek-V4 has no Mamba or circular-buffer state bucket, and
    with a repeat count every window bucket is split by the pattern, so no state-bucket capping applies."""
    bucketed = []
    for bucket in _buckets(layers):
        by_page: dict[int, list[CacheLayer]] = {}
        for layer in bucket:
            by_page.setdefault(layer.page_bytes, []).append(layer)
        balanced = len({len(v) for v in by_page.values()}) == 1
        most = Counter(layer.page_bytes for layer in bucket).most_common(1)[0][1]
        bucketed.append((bucket, by_page, balanced, most))
    floor = max((most for _, by_page, bal, most in bucketed if bal and len(by_page) > 1), default=0)
    repeats = _approximate_gcd([most for *_, bal, most in bucketed if bal], floor) if floor else None
    groups: list[CacheGroup] = []
    for bucket, by_page, balanced, most in bucketed:
        n = cdiv(most, repeats) if balanced and repeats is not None else 1
        if n == 1:
            groups.append(CacheGroup(tuple(bucket)))
            continue
        pattern = list(zip(*by_page.values(), strict=False))
        for i in range(n):
            groups.append(CacheGroup(tuple(layer for rep in pattern[i::n] for layer in rep)))
    return tuple(groups)


@dataclass(frozen=True)
class Dsv4Cache:
    """The pool geometry on one rank (every rank: the caches are replicated over TP)."""

    layers: tuple[CacheLayer, ...]
    groups: tuple[CacheGroup, ...]
    block_size: int

    @property
    def bytes_per_block(self) -> int:
        """`_get_kv_cache_bytes_per_block` for a block-outermost layout: the largest group's Σ pages (no layer has a
        block-stride alignment, so the lcm round-up is 1)."""
        return max(g.page_bytes for g in self.groups)

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        return sum(g.blocks_per_request(max_model_len, in_flight_tokens) for g in self.groups)

    def request_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        """`_max_memory_usage_bytes_from_groups`: bytes_per_block × Σ groups' pages (the "to serve one request"
        check)."""
        return self.bytes_per_block * self.blocks_per_request(max_model_len, in_flight_tokens)

    def bytes_per_token(self) -> int:
        """What one more token of a long context costs: bytes_per_block spread over the full groups' tokens per block
        (the window and state groups are capped per request)."""
        return cdiv(self.bytes_per_block, self.block_size)

    def per_token_by_kind(self) -> dict[str, float]:
        """Unpadded bytes per token of context per cache kind, summed over the layers (the hand computation)."""
        out: dict[str, float] = {}
        for layer in self.layers:
            if layer.kind != FULL:
                continue
            kind = "indexer_k" if "indexer" in layer.name else f"c{layer.tokens_per_state}a"
            out[kind] = out.get(kind, 0.0) + layer.unpadded_bytes / layer.block_size
        return out


@functools.lru_cache(maxsize=64)  # frozen shape in, frozen pool out: a plan asks hundreds of times
def dsv4_cache(
    attn: Dsv4Shape, *, block_size: int | None = None, kv_cache_dtype: str = "auto", indexer_fp4: bool = False
) -> Dsv4Cache:
    """The pool of one rank for these flags; block_size None = vLLM's choice (256)."""
    resolve_cache_dtype(kv_cache_dtype)
    block = block_size or DSV4_BLOCK_SIZE
    layers = cache_layers(attn, block_size=block, indexer_fp4=indexer_fp4)
    return Dsv4Cache(layers, packed_groups(layers), block)


def kv_tokens(cache: Dsv4Cache, num_blocks: int, max_model_len: int, in_flight_tokens: int) -> int:
    """vLLM's "GPU KV cache size: N tokens": int(num_blocks / blocks per request × max_model_len)."""
    per_request = cache.blocks_per_request(max_model_len, in_flight_tokens)
    return math.floor(num_blocks / per_request * max_model_len) if per_request else 0
