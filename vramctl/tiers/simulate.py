"""Trace-driven simulator of the GPU prefix cache plus a host tier and an optional disk tier.

Semantics (the contract the tests check; docs/tiers.md uses the same):
- Lookup, before any state changes: a request hits the longest prefix of its blocks that is resident in
  some tier (a block counts only if every block before it hit). The hit tokens are
  min(hit_blocks × block_size, input_length); each hit block's tokens (block i holds
  min(block_size, input_length − i·block_size)) go to the fastest tier holding it (GPU, then host, then
  disk).
- Thresholds, as SGLang applies them (`python/sglang/srt/mem_cache/hiradix_cache.py` (SGLang v0.5.23), 0.5.18 hiradix_cache.py L210/L1395 and L626/L728):
  the host-resident part of the prefix is loaded back only if it is at least `load_back_threshold` tokens
  (default 10), otherwise the prefix ends where the GPU part ends; the disk (L3) part is prefetched only if
  it is at least `prefetch_threshold` tokens (default 256), otherwise the prefix ends before it.
- Update, after the lookup: every block of the request, in order, is touched if it is on the GPU, else
  inserted there (loaded from host/disk if it was part of the hit, recomputed otherwise). Evictions use
  the tier's policy (LRU, LFU, ARC).
- Write policies, as the engines define them:
  - `write_through` (SGLang default, threshold 1) and `write_through_selective` (threshold 2): every
    radix node has a hit count that SGLang increments on each insert that reaches a device-resident node,
    including the insert that creates it (hiradix_cache.py `_insert_helper` calls `_inc_hit_count` on the
    new node; unified_radix_cache.py L558 in 0.5.23). A node not yet on the host is copied there once its
    count reaches the threshold: write_through copies every block when it is first computed,
    write_through_selective when it is used a second time. The ancestors of a backed-up block that are
    not yet on the host are copied with it (0.5.23 `_build_backup_kv_action`: the backed-up set stays a
    prefix). A node whose host copy is recomputed rather than loaded is not counted (the `node.evicted`
    branch). The host never drops the copy of a block that is still on the GPU.
  - `write_back` (SGLang, "will be deprecated"): nothing is copied on a hit; a GPU eviction stages the
    block to the host if it has no copy there and the host has room.
  - `lazy` (vLLM SimpleCPUOffloadConnector `lazy_offload=True`, `vllm/v1/kv_offload/` (vLLM v0.33.0)): before each scheduler step
    the cursor walks the `lazy_window` blocks nearest eviction in the GPU queue and copies those not on the
    host (`_prepare_lazy_store_specs`; the window is 2·cdiv(max_num_batched_tokens, block_size) blocks,
    `_estimate_lazy_target_blocks` with WATERMARK_RATIO 1.0). A step is modelled as window/2 blocks of
    newly inserted KV. The host tier is vLLM's CPU block pool: its LRU order changes only when a block is
    stored or loaded. Under the SGLang policies the host shares the radix node's recency (every access
    refreshes it).
- Hierarchies: `inclusive` (the engines': a block loaded from host keeps its host copy) and `exclusive`
  (demote on evict: a GPU victim moves to the host, a host hit moves back to the GPU; host victims move
  to the disk tier). Exclusive requires `write_back`.
- Disk tier (SGLang L3): inclusive: every host write is also written to disk (write_backup_storage, skipping
  blocks already there); a disk hit is prefetched into the host and loaded to the GPU. Exclusive: host
  victims are demoted to disk.

This is a flat block model: one id per block, no radix nodes, no pinning of in-flight requests, no timing.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.tiers.policies import EVICTION_POLICIES, PinnedLRUCache, TierCache, make_cache
from vramctl.tiers.trace import Trace

WRITE_THROUGH = "write_through"
WRITE_THROUGH_SELECTIVE = "write_through_selective"
WRITE_BACK = "write_back"
LAZY = "lazy"
WRITE_POLICIES: tuple[str, ...] = (WRITE_THROUGH, WRITE_THROUGH_SELECTIVE, WRITE_BACK, LAZY)
INCLUSIVE = "inclusive"
EXCLUSIVE = "exclusive"
HIERARCHIES: tuple[str, ...] = (INCLUSIVE, EXCLUSIVE)

GPU = "gpu"
HOST = "host"
DISK = "disk"

DEFAULT_PREFETCH_THRESHOLD = 256
"""SGLang `prefetch_threshold` default (tokens), `python/sglang/srt/mem_cache/hiradix_cache.py` (SGLang v0.5.23)"""
DEFAULT_LOAD_BACK_THRESHOLD = 10
"""SGLang `load_back_threshold` (tokens), `python/sglang/srt/mem_cache/hiradix_cache.py` (SGLang v0.5.23)"""
DEFAULT_LAZY_WINDOW_TOKENS = 2 * 8192
"""vLLM lazy offload target: 2 × max_num_batched_tokens (8192, the default on large GPUs)."""

_WRITE_THRESHOLD = {WRITE_THROUGH: 1, WRITE_THROUGH_SELECTIVE: 2}


@dataclass(frozen=True)
class TierConfig:
    name: str
    capacity_tokens: int | None
    """None: unlimited."""


@dataclass(frozen=True)
class SimConfig:
    tiers: tuple[TierConfig, ...]
    """GPU first, then an optional host tier, then an optional disk tier."""
    eviction: str = "lru"
    write_policy: str = WRITE_THROUGH
    hierarchy: str = INCLUSIVE
    prefetch_threshold: int = DEFAULT_PREFETCH_THRESHOLD
    load_back_threshold: int = DEFAULT_LOAD_BACK_THRESHOLD
    lazy_window_tokens: int = DEFAULT_LAZY_WINDOW_TOKENS
    bytes_per_token: int | None = None
    """KV bytes per token (per rank) to turn tokens into bytes; None leaves the byte fields null."""

    def to_json(self) -> dict[str, Any]:
        return {
            "tiers": [{"name": t.name, "capacity_tokens": t.capacity_tokens} for t in self.tiers],
            "eviction": self.eviction,
            "write_policy": self.write_policy,
            "hierarchy": self.hierarchy,
            "prefetch_threshold_tokens": self.prefetch_threshold,
            "load_back_threshold_tokens": self.load_back_threshold,
            "lazy_window_tokens": self.lazy_window_tokens if self.write_policy == LAZY else None,
            "bytes_per_token": self.bytes_per_token,
        }


def validate_config(config: SimConfig, *, block_size: int) -> None:
    """Raise BadInputError (one line, naming the flag) for an impossible configuration."""
    names = [t.name for t in config.tiers]
    if names == [GPU, DISK]:
        raise BadInputError(
            "--disk-capacity needs --host-capacity: the disk tier is reached through the host tier (SGLang's L3 "
            "prefetches into the host pool; vLLM's tiering spec stages secondary tiers through the CPU tier); "
            "to model a direct GPU-disk tier, give it as --host-capacity with the disk's bandwidth"
        )
    if names not in ([GPU], [GPU, HOST], [GPU, HOST, DISK]):
        raise BadInputError(f"tiers must be gpu [host [disk]], got {names}")
    for tier in config.tiers:
        cap = tier.capacity_tokens
        if cap is None:
            continue
        if cap <= 0:
            raise BadInputError(
                f"--{tier.name}-capacity {cap}: a capacity must be positive (tokens, or bytes with a unit)"
            )
        if cap < block_size:
            raise BadInputError(
                f"--{tier.name}-capacity {cap}: less than one {block_size}-token block (--trace-block-size {block_size})"
            )
    if config.eviction not in EVICTION_POLICIES:
        raise BadInputError(
            f"--eviction {config.eviction}: unknown policy (choose from {', '.join(EVICTION_POLICIES)})"
        )
    if config.write_policy not in WRITE_POLICIES:
        raise BadInputError(
            f"--write-policy {config.write_policy}: unknown policy (choose from {', '.join(WRITE_POLICIES)})"
        )
    if config.hierarchy not in HIERARCHIES:
        raise BadInputError(f"--hierarchy {config.hierarchy}: unknown (choose from {', '.join(HIERARCHIES)})")
    if config.hierarchy == EXCLUSIVE and config.write_policy != WRITE_BACK:
        raise BadInputError(
            f"--hierarchy exclusive with --write-policy {config.write_policy}: an exclusive hierarchy keeps one copy, "
            f"written when the GPU evicts it; use --write-policy write_back"
        )
    if config.prefetch_threshold < 0:
        raise BadInputError(f"--prefetch-threshold {config.prefetch_threshold}: must be >= 0 tokens")
    if config.load_back_threshold < 0:
        raise BadInputError(f"--load-back-threshold {config.load_back_threshold}: must be >= 0 tokens")
    if config.lazy_window_tokens < block_size:
        raise BadInputError(
            f"--lazy-window {config.lazy_window_tokens}: must be at least one block ({block_size} tokens)"
        )
    if config.bytes_per_token is not None and config.bytes_per_token <= 0:
        raise BadInputError(f"bytes per token {config.bytes_per_token}: must be positive")


@dataclass(frozen=True)
class TierResult:
    name: str
    capacity_tokens: int | None
    capacity_blocks: int | None
    hit_tokens: int
    token_hit_rate: float
    request_hit_rate: float
    read_tokens: int
    """Tokens fetched from this tier into the GPU (0 for the GPU tier itself)."""
    written_tokens: int
    """GPU: tokens whose KV was computed or loaded into HBM; host/disk: tokens copied into the tier."""
    evicted_blocks: int | None
    """None where the method does not count them (the stack-distance sweep)."""
    peak_used_blocks: int
    bytes_per_token: int | None = None
    fetches: int = 0
    """Requests that loaded at least one block from this tier (each pays the tier's fixed latency once)."""

    def _bytes(self, tokens: int) -> int | None:
        return None if self.bytes_per_token is None else tokens * self.bytes_per_token

    @property
    def written_bytes(self) -> int | None:
        return self._bytes(self.written_tokens)

    @property
    def read_bytes(self) -> int | None:
        return self._bytes(self.read_tokens)

    def peak_used_tokens(self, block_size: int) -> int:
        return self.peak_used_blocks * block_size

    def to_json(self, block_size: int) -> dict[str, Any]:
        return {
            "name": self.name,
            "capacity_tokens": self.capacity_tokens,
            "capacity_blocks": self.capacity_blocks,
            "capacity_bytes": None if self.capacity_tokens is None else self._bytes(self.capacity_tokens),
            "hit_tokens": self.hit_tokens,
            "token_hit_rate": self.token_hit_rate,
            "request_hit_rate": self.request_hit_rate,
            "read_tokens": self.read_tokens,
            "read_bytes": self.read_bytes,
            "written_tokens": self.written_tokens,
            "written_bytes": self.written_bytes,
            "write_amplification": (self.written_tokens / self.read_tokens) if self.read_tokens else None,
            "evicted_blocks": self.evicted_blocks,
            "fetches": self.fetches,
            "peak_used_tokens": self.peak_used_tokens(block_size),
            "peak_used_bytes": self._bytes(self.peak_used_tokens(block_size)),
        }


@dataclass(frozen=True)
class SimResult:
    config: SimConfig
    block_size: int
    requests: int
    input_tokens: int
    hit_tokens: int
    token_hit_rate: float
    """Σ hit tokens / Σ input tokens (token-weighted; docs/tiers.md reports this one)."""
    request_hit_rate: float
    """Mean over requests of hit tokens / input tokens (the per-request average)."""
    tiers: tuple[TierResult, ...]
    method: str = "replay"
    """`replay` (request by request) or `stack-distance` (one Mattson pass for every LRU capacity)."""
    notes: tuple[str, ...] = field(default=(), compare=False)

    def tier(self, name: str) -> TierResult | None:
        return next((t for t in self.tiers if t.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "hit_tokens": self.hit_tokens,
            "token_hit_rate": self.token_hit_rate,
            "request_hit_rate": self.request_hit_rate,
            "block_size": self.block_size,
            "method": self.method,
            "config": self.config.to_json(),
            "tiers": [t.to_json(self.block_size) for t in self.tiers],
        }


def _blocks(capacity_tokens: int | None, block_size: int) -> int | None:
    return None if capacity_tokens is None else capacity_tokens // block_size


def simulate(trace: Trace, config: SimConfig) -> SimResult:
    """Replay `trace` through the tiers of `config`, request by request."""
    bs = trace.block_size
    validate_config(config, block_size=bs)
    g = make_cache(config.eviction, _blocks(config.tiers[0].capacity_tokens, bs))
    h_cfg = next((t for t in config.tiers if t.name == HOST), None)
    d_cfg = next((t for t in config.tiers if t.name == DISK), None)
    policy = config.write_policy
    exclusive = config.hierarchy == EXCLUSIVE
    sglang_recency = policy != LAZY and not exclusive
    # SGLang's host (LRU by the node's last access) never drops the copy of a node still on the device; vLLM's
    # CPU policies (the only home of lfu/arc here) evict by their own order.
    pinning = sglang_recency and h_cfg is not None and config.eviction == "lru"
    h: TierCache | None = None
    pinned_host: PinnedLRUCache | None = None
    if h_cfg is not None:
        if pinning:
            h = pinned_host = PinnedLRUCache(_blocks(h_cfg.capacity_tokens, bs), g.members)
        else:
            h = make_cache(config.eviction, _blocks(h_cfg.capacity_tokens, bs))
    d: TierCache | None = make_cache(config.eviction, _blocks(d_cfg.capacity_tokens, bs)) if d_cfg else None
    nothing: dict[int, None] = {}
    in_g = g.members.__contains__
    in_h = (h.members if h is not None else nothing).__contains__
    in_d = (d.members if d is not None else nothing).__contains__

    write_threshold = _WRITE_THRESHOLD.get(policy, 0)
    counting = write_threshold > 1 and h is not None
    backup_on_insert = write_threshold == 1 and h is not None
    evict_hook = h is not None and (exclusive or policy == WRITE_BACK or counting)
    host_pin: Container[int] | None = g.members if pinning else None
    load_back_threshold = config.load_back_threshold
    prefetch_threshold = config.prefetch_threshold
    lazy_blocks = max(1, config.lazy_window_tokens // bs)
    lazy_step = max(1, lazy_blocks // 2)
    lazy = policy == LAZY and h is not None
    tiered = h is not None or d is not None

    hit_count: dict[int, int] = {}
    block_tokens: dict[int, int] = {}
    tier_hit = [0, 0, 0]
    tier_req_rate = [0.0, 0.0, 0.0]
    written = [0, 0, 0]
    evictions = [0, 0, 0]
    peak = [0, 0, 0]
    fetches = [0, 0, 0]

    def to_disk(block: int) -> None:
        if d is None or in_d(block):
            return
        ok, out = d.admit(block)
        if ok:
            written[2] += block_tokens.get(block, bs)
        evictions[2] += len(out)

    def to_host(block: int) -> bool:
        """Copy a block to the host (inclusive: and through to disk). False when there is no room."""
        assert h is not None
        ok, out = h.admit(block, host_pin)
        if out:
            evictions[1] += len(out)
            for victim in out:
                if exclusive:
                    to_disk(victim)
                if counting and not in_g(victim):
                    hit_count.pop(victim, None)
        if not ok:
            return False
        written[1] += block_tokens.get(block, bs)
        if d is not None and not exclusive:
            to_disk(block)
        return True

    def on_gpu_evicted(victims: list[int]) -> None:
        evictions[0] += len(victims)
        if h is None:
            return
        for victim in victims:
            if exclusive or (policy == WRITE_BACK and not in_h(victim)):
                to_host(victim)
            if counting and not in_h(victim):
                hit_count.pop(victim, None)

    def lazy_walk() -> None:
        for block in list(itertools.islice(g.eviction_order(), lazy_blocks)):
            if not in_h(block):
                to_host(block)

    lengths = trace.input_lengths
    g_touch = g.touch
    g_admit = g.admit
    h_touch = h.touch if h is not None else in_h
    d_touch = d.touch if d is not None else in_d
    for r, bl in enumerate(trace.blocks):
        length = lengths[r]
        nb = len(bl)
        # ---- lookup (no state changes) ------------------------------------------------------------
        k = 0
        while k < nb and in_g(bl[k]):
            k += 1
        gpu_prefix = k
        src: list[int] = []
        if tiered:
            src = [0] * nb
            j = k
            host_tokens = 0
            while j < nb:
                b = bl[j]
                if not in_g(b):
                    if in_h(b):
                        src[j] = 1
                        host_tokens += min(bs, length - j * bs)
                    else:
                        break
                j += 1
            if 0 < host_tokens < load_back_threshold:
                for i in range(gpu_prefix, j):
                    src[i] = 0
                k = gpu_prefix
            else:
                k = j
                if d is not None and k < nb and in_d(bl[k]):
                    m = k
                    while m < nb:
                        b = bl[m]
                        if not in_g(b):
                            if in_h(b):
                                src[m] = 1
                            elif in_d(b):
                                src[m] = 2
                            else:
                                break
                        m += 1
                    if min(m * bs, length) - min(k * bs, length) >= prefetch_threshold:
                        k = m
                    else:
                        for i in range(k, m):
                            src[i] = 0
            per = [0, 0, 0]
            for i in range(k):
                per[src[i]] += max(0, min(bs, length - i * bs))
            for t in (0, 1, 2):
                if per[t]:
                    tier_hit[t] += per[t]
                    tier_req_rate[t] += per[t] / length
                    fetches[t] += 1
            written[0] += length - per[0]
        else:
            hit = min(k * bs, length)
            tier_hit[0] += hit
            tier_req_rate[0] += hit / length
            written[0] += length - hit
        # ---- update: touch or insert every block, in order ----------------------------------------
        if not tiered:
            for b in bl:
                if in_g(b):
                    g_touch(b)
                else:
                    out = g_admit(b)[1]
                    if out:
                        evictions[0] += len(out)
            if len(g) > peak[0]:
                peak[0] = len(g)
            continue
        if lazy:
            lazy_walk()
        admitted_since_walk = 0
        scanned = 0
        for i, b in enumerate(bl):
            tokens = length - i * bs
            block_tokens[b] = tokens if tokens < bs else bs
            source = src[i] if (tiered and i < k) else 0
            if in_g(b):
                g.touch(b)
                if counting:
                    hit_count[b] = hit_count.get(b, 0) + 1
            else:
                if source:
                    if source == 2:
                        if exclusive:
                            d.discard(b)  # type: ignore[union-attr]
                        elif h is not None and not in_h(b):
                            to_host(b)  # an L3 prefetch lands in the host pool first
                    elif exclusive:
                        h.discard(b)  # type: ignore[union-attr]
                    if counting:
                        hit_count[b] = hit_count.get(b, 0) + 1
                elif exclusive:
                    # Recomputed, but a stale copy below would break "one copy": drop it.
                    if in_h(b):
                        h.discard(b)  # type: ignore[union-attr]
                    if in_d(b):
                        d.discard(b)  # type: ignore[union-attr]
                elif counting and not in_h(b):
                    hit_count[b] = 1
                if lazy:
                    if admitted_since_walk >= lazy_step:
                        lazy_walk()
                        admitted_since_walk = 0
                    admitted_since_walk += 1
                out = g_admit(b)[1]
                if out:
                    if pinned_host is not None:
                        for victim in out:
                            pinned_host.unpinned(victim)
                    if evict_hook:
                        on_gpu_evicted(out)
                    else:
                        evictions[0] += len(out)
            if sglang_recency:
                if in_h(b):
                    h_touch(b)
                if in_d(b):
                    d_touch(b)
            elif lazy and source == 1 and in_h(b):
                h_touch(b)
            if (
                (backup_on_insert or (counting and hit_count.get(b, 0) >= write_threshold))
                and not in_h(b)
                and in_g(b)
            ):
                # Back up the not-yet-backed-up ancestors first, then b (the backed-up set stays a prefix).
                for a in bl[scanned:i]:
                    if not in_h(a) and in_g(a):
                        to_host(a)
                scanned = i
                to_host(b)
        if len(g) > peak[0]:
            peak[0] = len(g)
        if h is not None and len(h) > peak[1]:
            peak[1] = len(h)
        if d is not None and len(d) > peak[2]:
            peak[2] = len(d)

    n = trace.num_requests
    total = trace.input_tokens
    bpt = config.bytes_per_token
    index = {GPU: 0, HOST: 1, DISK: 2}
    tiers = []
    for tier in config.tiers:
        t = index[tier.name]
        tiers.append(
            TierResult(
                name=tier.name,
                capacity_tokens=tier.capacity_tokens,
                capacity_blocks=_blocks(tier.capacity_tokens, bs),
                hit_tokens=tier_hit[t],
                token_hit_rate=tier_hit[t] / total,
                request_hit_rate=tier_req_rate[t] / n,
                read_tokens=tier_hit[t] if t else 0,
                written_tokens=written[t],
                evicted_blocks=evictions[t],
                peak_used_blocks=peak[t],
                bytes_per_token=bpt,
                fetches=fetches[t] if t else 0,
            )
        )
    hit_total = sum(tier_hit)
    return SimResult(
        config=config,
        block_size=bs,
        requests=n,
        input_tokens=total,
        hit_tokens=hit_total,
        token_hit_rate=hit_total / total,
        request_hit_rate=sum(tier_req_rate) / n,
        tiers=tuple(tiers),
        method="replay",
    )


# --------------------------------------------------------------------------------------------------
# What the hits are worth


@dataclass(frozen=True)
class TierLinkRate:
    """Bandwidths and fixed latency of a tier, for the economics (from `tiers plan`'s table)."""

    read_bytes_per_s: float
    write_bytes_per_s: float | None
    latency_s: float
    source: str


@dataclass(frozen=True)
class TierEconomics:
    name: str
    read_bytes_per_s: float
    write_bytes_per_s: float | None
    source: str
    recompute_avoided_s: float
    """Hit tokens of this tier / R: the prefill the tier saved."""
    transfer_s: float
    """Bytes read / read bandwidth + fetches × latency: the load-back time on the critical path."""
    write_s: float
    """Bytes written / write bandwidth: background copies (off the critical path, still link time)."""

    @property
    def net_saved_s(self) -> float:
        return self.recompute_avoided_s - self.transfer_s

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "read_bytes_per_s": self.read_bytes_per_s,
            "write_bytes_per_s": self.write_bytes_per_s,
            "source": self.source,
            "recompute_avoided_s": self.recompute_avoided_s,
            "transfer_s": self.transfer_s,
            "write_s": self.write_s,
            "net_saved_s": self.net_saved_s,
        }


@dataclass(frozen=True)
class Economics:
    prefill_tokens_per_s: float
    prefill_source: str
    tiers: tuple[TierEconomics, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "prefill_source": self.prefill_source,
            "tiers": [t.to_json() for t in self.tiers],
        }


def economics(
    result: SimResult, *, prefill_tokens_per_s: float, prefill_source: str, links: dict[str, TierLinkRate]
) -> Economics | None:
    """Recompute time avoided vs transfer time spent, per non-GPU tier. None without bytes per token."""
    bpt = result.config.bytes_per_token
    if bpt is None:
        return None
    out = []
    for tier in result.tiers:
        link = links.get(tier.name)
        if tier.name == GPU or link is None:
            continue
        write_bw = link.write_bytes_per_s or link.read_bytes_per_s
        out.append(
            TierEconomics(
                name=tier.name,
                read_bytes_per_s=link.read_bytes_per_s,
                write_bytes_per_s=link.write_bytes_per_s,
                source=link.source,
                recompute_avoided_s=tier.hit_tokens / prefill_tokens_per_s,
                transfer_s=tier.read_tokens * bpt / link.read_bytes_per_s + tier.fetches * link.latency_s,
                write_s=tier.written_tokens * bpt / write_bw,
            )
        )
    return Economics(prefill_tokens_per_s, prefill_source, tuple(out))


# --------------------------------------------------------------------------------------------------
# One pass for every LRU capacity (Mattson et al. 1970 stack distances; vramctl.tiers.stackdist)


def stack_profile(trace: Trace) -> Any:
    """The exact single-tier LRU hit curve of `trace` (a `vramctl.tiers.stackdist.HitCurve`; numpy)."""
    from vramctl.tiers.stackdist import columns_of, exact_curve

    return exact_curve(columns_of(trace))


def lru_sweep(
    trace: Any,
    capacities_tokens: Sequence[int | None],
    *,
    bytes_per_token: int | None = None,
    profile: Any = None,
) -> list[SimResult]:
    """Single-tier (GPU-only) LRU at every capacity from one stack-distance pass.

    `trace`: a Trace or a `stackdist.TraceColumns`; `profile`: a precomputed `stackdist.HitCurve` (exact, or
    a SHARDS estimate: then the hit counts are estimates and `method` names the sampling)."""
    bs = trace.block_size
    base = SimConfig(tiers=(TierConfig(GPU, None),), bytes_per_token=bytes_per_token)
    for cap in capacities_tokens:
        validate_config(replace(base, tiers=(TierConfig(GPU, cap),)), block_size=bs)
    if profile is None:
        from vramctl.tiers.stackdist import TraceColumns, columns_of, exact_curve

        profile = exact_curve(trace if isinstance(trace, TraceColumns) else columns_of(trace))
    results = []
    n = trace.num_requests
    total = trace.input_tokens
    for cap in capacities_tokens:
        cap_blocks = _blocks(cap, bs)
        hit, share = profile.at(cap_blocks)
        hit = min(hit, total)
        tier = TierResult(
            name=GPU,
            capacity_tokens=cap,
            capacity_blocks=cap_blocks,
            hit_tokens=hit,
            token_hit_rate=hit / total,
            request_hit_rate=share / n,
            read_tokens=0,
            written_tokens=total - hit,
            evicted_blocks=None,
            peak_used_blocks=min(cap_blocks, trace.num_unique_blocks)
            if cap_blocks is not None
            else trace.num_unique_blocks,
            bytes_per_token=bytes_per_token,
        )
        results.append(
            SimResult(
                config=replace(base, tiers=(TierConfig(GPU, cap),)),
                block_size=bs,
                requests=n,
                input_tokens=total,
                hit_tokens=hit,
                token_hit_rate=hit / total,
                request_hit_rate=share / n,
                tiers=(tier,),
                method=profile.method,
            )
        )
    return results
