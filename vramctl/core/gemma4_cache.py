"""Gemma-4's KV cache as vLLM 0.32.0 allocates it: two page sizes (sliding and full-attention layers of different
head sizes and KV heads), unified into one page, grouped by the hybrid allocator.

Every term below is read from vLLM 0.32.0's source (paths relative to `vllm/`):

- Specs (`model_executor/models/gemma4.py:498-519`, `Attention` with `per_layer_sliding_window`): a layer owning
  its KV is a `SlidingWindowSpec` (window `sliding_window`) or a `FullAttentionSpec`, page
  2 × block × max(1, kv_heads // tp) × head_dim × dtype bytes (`v1/kv_cache_interface.py:556-567`; K = V layers
  still hold a V page: vLLM writes the normed K into both). KV-shared layers (the last `num_kv_shared_layers`,
  `kv_sharing_target_layer_name`) get no spec (`v1/worker/gpu_model_runner.py:7160-7172`).
- Layout: FlashAttention (FA4) and Triton, the backends `Gemma4Config` picks for mixed head sizes
  (`model_executor/models/config.py:229-290`), declare no KV layout, so the default preference applies
  (`v1/attention/backends/utils.py:195-201`, LBNHC first); specs of different (heads, page) keep only the
  block-compact layouts, LBNHC still first (`resolve_kv_cache_layout`, utils.py:257-347). LBNHC is not
  block-outermost, so `_get_packed_kv_cache_groups` returns None (`v1/core/kv_cache_utils.py:1875-1878`) and
  `unify_kv_cache_spec_page_size` (:1292-1354) raises each smaller page's block size by max_page / page (or, when
  that does not divide, pads the page to the maximum).
- Grouping (`_get_kv_cache_groups_uniform_page_size`, :1362-1502): one bucket per spec (sliding, full);
  group_size = the smallest bucket's layer count, or the largest if it is under 1.5 × the smallest; each bucket
  splits into cdiv(n, group_size) groups.
- Pool: num_blocks = available // bytes_per_block (:1623-1627), bytes_per_block = the largest group's Σ layer
  pages (:1520-1531, layer-outer); a request takes from each group the pages its spec needs
  (`_max_memory_usage_bytes_from_groups`, :2337-2366): full cdiv(len, block), sliding
  cdiv(min(window − 1 + in-flight, len), block) + 1.

Pure: no torch. Sizes are int bytes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from vramctl.core.gemma4 import FULL, Gemma4Shape
from vramctl.core.units import cdiv


@dataclass(frozen=True)
class CacheLayer:
    """One layer's KV cache spec after page unification."""

    layer: int
    kind: str
    block_size: int
    page_bytes: int
    token_bytes: int
    """2 × kv_heads × head_dim × dtype bytes: one token's K and V on this rank."""
    window: int = 0


@dataclass(frozen=True)
class CacheGroup:
    kind: str
    layers: tuple[CacheLayer, ...]

    @property
    def page_bytes(self) -> int:
        return sum(layer.page_bytes for layer in self.layers)

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        first = self.layers[0]
        if first.kind == FULL:
            return cdiv(max_model_len, first.block_size)
        return cdiv(min(first.window - 1 + in_flight_tokens, max_model_len), first.block_size) + 1


def spec_layers(
    shape: Gemma4Shape, *, block_size: int, tp: int = 1, cache_dtype_bytes: int = 2
) -> tuple[CacheLayer, ...]:
    """The layers that own a KV cache, with their page before unification."""
    out = []
    for i, kind in enumerate(shape.layer_types):
        if shape.is_shared(i):
            continue
        per_token = 2 * max(1, shape.kv_heads[i] // tp) * shape.head_dims[i] * cache_dtype_bytes
        window = 0 if kind == FULL else shape.sliding_window
        out.append(CacheLayer(i, kind, block_size, block_size * per_token, per_token, window))
    return tuple(out)


def unify(layers: tuple[CacheLayer, ...]) -> tuple[CacheLayer, ...]:
    """`unify_kv_cache_spec_page_size`: the smaller pages' block size × (max / page), else padded to the max."""
    top = max(layer.page_bytes for layer in layers)
    out = []
    for layer in layers:
        if layer.page_bytes == top:
            out.append(layer)
        elif top % layer.page_bytes == 0:
            ratio = top // layer.page_bytes
            out.append(CacheLayer(layer.layer, layer.kind, layer.block_size * ratio, top, layer.token_bytes,
                                  layer.window))
        else:
            out.append(CacheLayer(layer.layer, layer.kind, layer.block_size, top, layer.token_bytes, layer.window))
    return tuple(out)


def groups_of(layers: tuple[CacheLayer, ...]) -> tuple[CacheGroup, ...]:
    """`_get_kv_cache_groups_uniform_page_size` over the (sliding, full) buckets; one kind: one group."""
    buckets: dict[str, list[CacheLayer]] = {}
    for layer in layers:
        buckets.setdefault(layer.kind, []).append(layer)
    if len(buckets) == 1:
        kind, only = next(iter(buckets.items()))
        return (CacheGroup(kind, tuple(only)),)
    sizes = [len(b) for b in buckets.values()]
    group_size = max(sizes) if max(sizes) < min(sizes) * 1.5 else min(sizes)
    groups = []
    for kind, bucket in buckets.items():
        n = cdiv(len(bucket), group_size)
        groups += [CacheGroup(kind, tuple(bucket[i::n])) for i in range(n)]
    return tuple(groups)


@dataclass(frozen=True)
class Gemma4Cache:
    """The pool geometry on one rank."""

    layers: tuple[CacheLayer, ...]
    groups: tuple[CacheGroup, ...]
    block_size: int

    @property
    def bytes_per_block(self) -> int:
        """`_get_kv_cache_bytes_per_block` (layer-outer): the largest group's Σ pages."""
        return max(g.page_bytes for g in self.groups)

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        return sum(g.blocks_per_request(max_model_len, in_flight_tokens) for g in self.groups)

    def request_bytes(self, max_model_len: int, in_flight_tokens: int) -> int:
        """`_max_memory_usage_bytes_from_groups`: bytes_per_block × Σ groups' pages."""
        return self.bytes_per_block * self.blocks_per_request(max_model_len, in_flight_tokens)

    def bytes_per_token(self) -> int:
        """One more token of a long context: the full-attention groups' block bytes over their tokens per block."""
        full = [g for g in self.groups if g.kind == FULL]
        if not full:
            return cdiv(self.bytes_per_block * len(self.groups), self.block_size)
        return sum(cdiv(self.bytes_per_block, g.layers[0].block_size) for g in full)

    def token_bytes_by_kind(self) -> dict[str, int]:
        """Unpadded K + V bytes per token per layer kind, summed over the layers (the hand computation)."""
        out: dict[str, int] = {}
        for layer in self.layers:
            out[layer.kind] = out.get(layer.kind, 0) + layer.token_bytes
        return out


@functools.lru_cache(maxsize=64)  # frozen shape in, frozen pool out: a plan asks hundreds of times
def gemma4_cache(
    shape: Gemma4Shape, *, block_size: int = 16, tp: int = 1, kv_cache_dtype: str = "auto"
) -> Gemma4Cache:
    """The pool of one rank for these flags (an fp8 KV cache: 1 byte per value)."""
    key = (kv_cache_dtype or "auto").lower()
    dtype_bytes = 1 if key.startswith("fp8") else shape.dtype_bytes
    layers = unify(spec_layers(shape, block_size=block_size, tp=tp, cache_dtype_bytes=dtype_bytes))
    return Gemma4Cache(layers, groups_of(layers), block_size)


def kv_tokens(cache: Gemma4Cache, num_blocks: int, max_model_len: int, in_flight_tokens: int) -> int:
    """vLLM's "GPU KV cache size: N tokens": int(num_blocks / blocks per request × max_model_len)."""
    per_request = cache.blocks_per_request(max_model_len, in_flight_tokens)
    return math.floor(num_blocks / per_request * max_model_len) if per_request else 0
