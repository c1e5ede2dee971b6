"""LRU prefix-cache hit curves at scale: exact stack distances in numpy, SHARDS sampling, sharded counting.

The model is `tiers simulate`'s single-tier LRU (see `vramctl.tiers.simulate`): a request hits the longest
prefix of its blocks resident at lookup, before its own touches. For block j of a request starting at flat
position s whose previous use (before s) is p_j, the LRU stack distance is d_j = 1 + F(p_j), where F(p) is
the number of distinct blocks whose last use before s lies in (p, s). F decreases with p, so the prefix rule
"block i hits iff max(d_0..d_i) <= C" is "F(m_i) < C" with m_i = min(p_0..p_i): one count per access.

F(p) is a dominance count over the trace's reuse pairs (q, next(q)) — positions of one block's consecutive
uses: F(p) = (s - p - 1) - #{q > p : next(q) < s}. All counts are answered offline: the points are sorted by
(q >> k, next) for each bit k, and a query's q-range (p, ∞) splits into at most one aligned block per bit
(a Fenwick decomposition), each answered by a binary search: O(N log² N) work in numpy, no Python per access.

Sampling (SHARDS, Waldspurger et al., "Efficient MRC Construction with SHARDS", FAST'15): a block is sampled
iff hash(block) < T (rate R = T / 2^64); only sampled blocks' uses are counted and queried, each count is
scaled by 1/R and each sampled access weighs 1/R. The fixed-size variant keeps at most `size` sampled
blocks: when a new one would exceed it, the block with the largest hash leaves and T drops to its hash.
The prefix minimum m_i is kept exact (one last-use time per distinct block), so the prefix rule is not
sampled; only F is estimated.

Sharding: the points are partitioned by block hash; each shard counts its own points for every query, and
the counts add up to the exact ones (the same curve as one process). Shards run in local processes
(`workers`) or on a Dask cluster (`vramctl.tiers.cluster`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vramctl.core.errors import BadInputError, VramctlError
from vramctl.core.exit_codes import ExitCode
from vramctl.tiers.trace import Trace

_MASK64 = (1 << 64) - 1


class ShardFailedError(VramctlError):
    """A shard's worker died twice (or the cluster could not run it): no partial curve is reported."""

    exit_code = ExitCode.BAD_INPUT


@dataclass(frozen=True)
class TraceColumns:
    """A trace as flat numpy arrays: per request input length, block offsets into one array of dense ids."""

    block_size: int
    input_lengths: Any
    """int64[n]"""
    offsets: Any
    """int64[n + 1]: request r's blocks are blocks[offsets[r]:offsets[r + 1]]."""
    blocks: Any
    """int32 (or int64) [N]: non-negative block ids, below `id_bound`."""
    num_unique_blocks: int
    source: str = ""
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def num_requests(self) -> int:
        return len(self.input_lengths)

    @property
    def input_tokens(self) -> int:
        return int(self.input_lengths.sum())

    @property
    def num_accesses(self) -> int:
        return len(self.blocks)

    @property
    def id_bound(self) -> int:
        """1 + the largest block id (per-block arrays are this long)."""
        return int(self.blocks.max()) + 1 if len(self.blocks) else 0


def columns_of(trace: Trace) -> TraceColumns:
    """The columns of an in-memory trace."""
    counts = np.fromiter((len(b) for b in trace.blocks), dtype=np.int64, count=trace.num_requests)
    offsets: Any = np.zeros(trace.num_requests + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    blocks = _compact(
        np.fromiter((x for b in trace.blocks for x in b), dtype=np.int64, count=int(offsets[-1]))
    )
    return TraceColumns(
        block_size=trace.block_size,
        input_lengths=np.asarray(trace.input_lengths, dtype=np.int64),
        offsets=offsets,
        blocks=blocks,
        num_unique_blocks=trace.num_unique_blocks,
        source=trace.source,
        warnings=trace.warnings,
    )


def make_columns(
    input_lengths: Any, block_counts: Any, blocks: Any, *, block_size: int, source: str = ""
) -> TraceColumns:
    """Columns from arrays (the synthetic generators use this). Ids are remapped to dense ints."""
    lengths = np.asarray(input_lengths, dtype=np.int64)
    counts = np.asarray(block_counts)
    if len(lengths) == 0:
        raise BadInputError(f"{source or 'trace'}: no requests (empty trace)")
    if (
        (lengths < 1).any()
        or (counts < 1).any()
        or ((counts.astype(np.int64) - 1) * block_size >= lengths).any()
    ):
        raise BadInputError(
            f"{source or 'trace'}: every request needs 1..ceil(input_length / block_size) blocks"
        )
    offsets: Any = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    raw = np.asarray(blocks)
    if raw.dtype.kind not in "iu":
        raw = raw.astype(np.int64)
    if len(raw) != offsets[-1]:
        raise BadInputError(f"{source or 'trace'}: {len(raw)} block ids for {int(offsets[-1])} block slots")
    if len(raw) and raw.min() >= 0 and raw.max() < min(2 * len(raw) + 1024, 1 << 31):
        # Already compact (a generator's ids): keep them, count the distinct ones with a bitmap.
        seen: Any = np.zeros(int(raw.max()) + 1, dtype=bool)
        seen[raw] = True
        return TraceColumns(
            block_size=block_size,
            input_lengths=lengths,
            offsets=offsets,
            blocks=raw if raw.dtype == np.int32 else raw.astype(np.int32),
            num_unique_blocks=int(seen.sum()),
            source=source,
        )
    uniq, first, inverse = np.unique(raw.astype(np.int64), return_index=True, return_inverse=True)
    rank: Any = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq), dtype=np.int64)
    return TraceColumns(
        block_size=block_size,
        input_lengths=lengths,
        offsets=offsets,
        blocks=_compact(rank[inverse.reshape(-1)]),
        num_unique_blocks=len(uniq),
        source=source,
    )


def _compact(ids: Any) -> Any:
    """int32 where the ids fit (half the memory of every per-access array derived from them)."""
    return ids.astype(np.int32) if len(ids) == 0 or int(ids.max()) < (1 << 31) else ids


# --------------------------------------------------------------------------------------------------
# The hit curve


@dataclass(frozen=True)
class HitCurve:
    """Hit tokens and Σ per-request hit ratios as a step function of the LRU capacity (in blocks).

    `distances[i]` ascending, distinct; at capacity C the hits are `cum_tokens[j]`, `cum_request_share[j]`
    for the last j with distances[j] <= C. A sampled curve's sums are estimates (each sampled access weighs
    1/R); `sample_rate` is None for the exact curve.
    """

    block_size: int
    requests: int
    input_tokens: int
    distances: Any
    cum_tokens: Any
    cum_request_share: Any
    method: str = "stack-distance"
    sample_rate: float | None = None
    """The final sampling rate R (fixed-size sampling lowers it as it goes)."""
    sampled_blocks: int | None = None
    accesses: int = 0
    lookup_rate: float = 1.0
    """The share of lookups weighed (1.0: all; below QUERY_LIMIT groups every lookup is)."""

    def expected_error(self, capacity_blocks: int | None) -> float:
        """The standard error of a sampled token hit rate at this capacity (0 for the exact curve).

        About R·C sampled blocks lie within LRU distance C, so an estimated distance near C is off by about
        C / sqrt(R·C) (Poisson); the hit rate moves by the curve's rise over C(1 ± 1/sqrt(R·C)), halved."""
        if self.sample_rate is None or capacity_blocks is None or self.input_tokens == 0:
            return 0.0
        eps = 1.0 / np.sqrt(max(1.0, self.sample_rate * capacity_blocks))
        low = self.at(int(capacity_blocks * max(0.0, 1 - eps)))[0]
        high = self.at(int(np.ceil(capacity_blocks * (1 + eps))))[0]
        return (high - low) / 2 / self.input_tokens

    def at(self, capacity_blocks: int | None) -> tuple[int, float]:
        """(hit tokens, Σ per-request hit ratios) for an LRU cache of `capacity_blocks` (None: unlimited)."""
        n = len(self.distances)
        idx = n if capacity_blocks is None else int(np.searchsorted(self.distances, capacity_blocks, "right"))
        if idx == 0:
            return 0, 0.0
        tokens = self.cum_tokens[idx - 1]
        return round(float(tokens)), float(self.cum_request_share[idx - 1])


def _curve(
    owned: list[Any],
    *,
    block_size: int,
    requests: int,
    input_tokens: int,
    accesses: int,
    **extra: Any,
) -> HitCurve:
    """The step function from per-lookup [distances, tokens, shares]; `owned` is emptied as it goes (the
    caller keeps no other reference, so each input is freed as soon as it is sorted)."""
    dist = owned.pop(0)
    order = np.argsort(dist, kind="stable")
    d = dist[order]
    del dist
    ct = owned.pop(0)[order]
    if ct.dtype.kind in "iu":
        ct = ct.astype(np.int64)  # per-lookup tokens may be int32; their running sum is not
    np.cumsum(ct, out=ct)
    cs = owned.pop(0)[order]
    np.cumsum(cs, out=cs)
    del order
    if len(d):
        last = np.flatnonzero(np.append(d[1:] != d[:-1], True))
        d, ct, cs = d[last], ct[last], cs[last]
    return HitCurve(
        block_size=block_size,
        requests=requests,
        input_tokens=input_tokens,
        distances=d,
        cum_tokens=ct,
        cum_request_share=cs,
        accesses=accesses,
        **extra,
    )


QUERY_LIMIT = 1_000_000
"""A sampled curve weighs every lookup up to this many (request, prefix-minimum) groups; beyond, a uniform
hash sample of the requests, halved each time the kept groups pass the limit (each then weighs 1 / rate)."""

_CHUNK = 1 << 18
"""Accesses per chunk (request-aligned): the per-chunk temporaries are a few times this, whatever the trace."""


@dataclass(frozen=True)
class Chunk:
    """Consecutive requests of a trace: local block offsets (from 0), input lengths and block ids."""

    offsets: Any
    input_lengths: Any
    blocks: Any

    @property
    def accesses(self) -> int:
        return len(self.blocks)


def iter_chunks(cols: TraceColumns, accesses: int | None = None) -> Iterator[Chunk]:
    """Request-aligned views of `cols`, about `accesses` (default _CHUNK) block accesses each (at least one
    request)."""
    accesses = accesses or _CHUNK
    offsets = cols.offsets
    ra = 0
    while ra < cols.num_requests:
        rb = int(np.searchsorted(offsets, offsets[ra] + accesses, side="right")) - 1
        rb = min(max(rb, ra + 1), cols.num_requests)
        pa, pb = int(offsets[ra]), int(offsets[rb])
        yield Chunk(offsets[ra : rb + 1] - pa, cols.input_lengths[ra:rb], cols.blocks[pa:pb])
        ra = rb


class _LastUse:
    """The flat position of every block's last use so far (-1: never): one int32 per block id while the
    positions fit, int64 beyond 2^31 accesses."""

    def __init__(self, bound: int = 1024) -> None:
        self.last: Any = np.full(max(bound, 1), -1, dtype=np.int32)

    def previous(self, blocks: Any, pos0: int) -> Any:
        """Each access's previous use (flat position, -1 for none), for the chunk at flat position pos0;
        then the chunk's uses become the last ones."""
        top = int(blocks.max()) + 1 if len(blocks) else 0
        if self.last.dtype == np.int32 and pos0 + len(blocks) >= (1 << 31) - 1:
            self.last = self.last.astype(np.int64)
        if top > len(self.last):
            grown: Any = np.full(max(top, 2 * len(self.last)), -1, dtype=self.last.dtype)
            grown[: len(self.last)] = self.last
            self.last = grown
        order = np.argsort(blocks, kind="stable")
        ordered = blocks[order]
        same = ordered[1:] == ordered[:-1]
        head: Any = np.ones(len(blocks), dtype=bool)
        head[1:] = ~same
        tail: Any = np.ones(len(blocks), dtype=bool)
        tail[:-1] = ~same
        prev: Any = np.empty(len(blocks), dtype=np.int64)
        prev[order[head]] = self.last[ordered[head]]  # (widened to int64)
        inner = np.flatnonzero(same)
        prev[order[inner + 1]] = order[inner] + pos0
        self.last[ordered[tail]] = order[tail] + pos0
        return prev


def _chunk_lookups(chunk: Chunk, prev: Any, pos0: int, bs: int) -> tuple[Any, Any, Any, Any, Any]:
    """The chunk's lookups that can hit, grouped into runs with the same request and prefix minimum m (one
    count answers a run): (lo = m + 1, request start s, Σ tokens, Σ tokens / input length, local request).

    Per access: a block repeated inside one request looks up its previous use before the request, like its
    first copy; an access can hit (at some capacity) iff no block up to it in its request is new; m is the
    running minimum of the previous uses along the request."""
    offsets = chunk.offsets
    nreq = len(offsets) - 1
    req: Any = np.repeat(np.arange(nreq, dtype=np.int64), np.diff(offsets))
    start: Any = offsets[:-1][req] + pos0
    e = prev.copy()
    inside = np.flatnonzero(e >= start)
    while len(inside):
        e[inside] = e[e[inside] - pos0]
        inside = inside[e[inside] >= start[inside]]
    del start
    cold: Any = np.cumsum(e < 0)
    before: Any = np.concatenate(([0], cold))[offsets[:-1]]
    valid: Any = cold == before[req]
    del cold, before
    big = pos0 + len(e) + 2
    shift: Any = (nreq - req) * big
    m: Any = np.where(valid, e, big - 1) + shift
    np.minimum.accumulate(m, out=m)
    m -= shift
    del shift, e
    idx: Any = np.flatnonzero(valid)
    r = req[idx]
    mm = m[idx]
    del m, req, valid
    head: Any = np.ones(len(idx), dtype=bool)
    head[1:] = (r[1:] != r[:-1]) | (mm[1:] != mm[:-1])
    heads = np.flatnonzero(head)
    if len(heads) == 0:
        nothing: Any = np.zeros(0, dtype=np.int64)
        return nothing, nothing, nothing, np.zeros(0), nothing
    tails: Any = np.append(heads[1:], len(idx)) - 1
    gr = r[heads]
    first_block = offsets[:-1][gr]
    ia = idx[heads] - first_block
    ib = idx[tails] - first_block + 1
    length = chunk.input_lengths[gr]
    tokens = np.minimum(ib * bs, length) - ia * bs
    return mm[heads] + 1, first_block + pos0, tokens, tokens / length, gr


_QUERY_CHUNK = 1 << 18


def dominance_counts(point_q: Any, point_next: Any, lo: Any, s: Any) -> Any:
    """For each query j: #{i: q_i >= lo_j and next_i < s_j} over the points (q_i, next_i), as int32.

    All values are non-negative and below 2^31. It is #{next_i < s_j} - #{q_i < lo_j and next_i < s_j}; the
    second count splits [0, lo_j) into at most one aligned block per bit k (a Fenwick decomposition), each
    answered by two binary searches in the points sorted by (q >> k, next). Each level's order is a stable
    sort of the previous one (merging sorted runs); queries go through in chunks of 2^18, so the memory is
    the points' key array plus a few chunk-sized temporaries."""
    out: Any = np.zeros(len(lo), dtype=np.int32)
    if len(point_q) == 0 or len(lo) == 0:
        return out
    by_next = np.sort(point_next)
    for a in range(0, len(lo), _QUERY_CHUNK):
        out[a : a + _QUERY_CHUNK] = np.searchsorted(by_next, s[a : a + _QUERY_CHUNK])
    del by_next
    scale = np.int64(max(int(point_next.max()), int(s.max())) + 1)
    key: Any = point_q.astype(np.int64)
    key *= scale
    key += point_next
    key.sort()
    top = int(lo.max())
    k = 0
    while (1 << k) <= top:
        for a in range(0, len(lo), _QUERY_CHUNK):
            lo_c: Any = lo[a : a + _QUERY_CHUNK].astype(np.int64)
            bit = np.flatnonzero((lo_c >> k) & 1)
            if len(bit):
                base = ((lo_c[bit] >> k) - 1) * scale
                found = np.searchsorted(key, base + s[a : a + _QUERY_CHUNK][bit])
                found -= np.searchsorted(key, base)
                out[a + bit] -= found.astype(np.int32)
        k += 1
        if (1 << k) > top:
            break
        # key = (q >> k, next) -> (q >> (k + 1), next): subtract (block - block // 2) * scale, then merge runs.
        for a in range(0, len(key), _QUERY_CHUNK):
            part = key[a : a + _QUERY_CHUNK]
            step: Any = part // scale
            step -= step >> 1
            step *= scale
            part -= step
        key.sort(kind="stable")
    return out


def _shard_of(blocks: Any, shards: int) -> Any:
    return (_hash64(blocks) >> np.uint64(32)) % np.uint64(shards)


def _hash64(blocks: Any, seed: int = 0) -> Any:
    """splitmix64 of the block ids (uint64): a spatial hash, uniform whatever the id order."""
    with np.errstate(over="ignore"):
        x = blocks.astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (seed + 1)) & _MASK64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


ShardRunner = Callable[[Sequence[tuple[Any, Any]], Any, Any], list[Any]]
"""Runs dominance_counts on each (points q, points next) shard for the same queries (lo, s)."""


def _in_process(shards: Sequence[tuple[Any, Any]], lo: Any, s: Any) -> list[Any]:
    return [dominance_counts(q, n, lo, s) for q, n in shards]


def exact_curve(cols: TraceColumns, *, shards: int = 1, runner: ShardRunner | None = None) -> HitCurve:
    """The exact single-tier LRU hit curve (identical to a replay at every capacity)."""
    n = cols.num_accesses
    if n >= 1 << 31:
        raise BadInputError(
            f"{cols.source or 'trace'}: {n:,} block accesses; at most 2^31 - 1 (use --sample-rate)"
        )
    # One pass in chunks: every access's previous use (flat int32 positions) and the grouped lookups.
    prev: Any = np.empty(n, dtype=np.int32)
    last = _LastUse(cols.id_bound)
    pieces: list[tuple[Any, ...]] = []
    pos0 = 0
    for chunk in iter_chunks(cols):
        p = last.previous(chunk.blocks, pos0)
        prev[pos0 : pos0 + chunk.accesses] = p
        lo_c, s_c, tok_c, share_c, _req = _chunk_lookups(chunk, p, pos0, cols.block_size)
        small = tok_c.astype(np.int32) if len(tok_c) and int(tok_c.max()) < (1 << 31) else tok_c
        pieces.append((lo_c.astype(np.int32), s_c.astype(np.int32), small, share_c))
        pos0 += chunk.accesses
    del last
    lo, q_s, tokens, share = (np.concatenate([piece[i] for piece in pieces]) for i in range(4))
    del pieces
    # The reuse pairs (q, next(q)) are (prev[t], t) for every access t with a previous use.
    has_next: Any = np.flatnonzero(prev >= 0).astype(np.int32)
    point_q = prev[has_next]
    del prev
    if shards <= 1:
        parts = [(point_q, has_next)]
    else:
        which = _shard_of(cols.blocks[has_next], shards)
        parts = [(point_q[which == k], has_next[which == k]) for k in range(shards)]
    del has_next, point_q
    counts = (runner or _in_process)(parts, lo, q_s)
    del parts
    inner = counts.pop(0)
    while counts:
        inner += counts.pop()
    # Distinct blocks last used in (m, s): the s - m - 1 positions, less those re-used before s; + 1.
    inner -= q_s
    inner += lo
    inner *= -1
    inner += 1
    del lo, q_s
    owned = [inner, tokens, share]
    del inner, tokens, share
    return _curve(
        owned,
        block_size=cols.block_size,
        requests=cols.num_requests,
        input_tokens=cols.input_tokens,
        accesses=n,
    )


# --------------------------------------------------------------------------------------------------
# SHARDS


def _rechunk(chunks: Iterable[Chunk]) -> Iterator[Chunk]:
    """Split chunks larger than _CHUNK accesses (request-aligned), so the temporaries stay bounded."""
    for chunk in chunks:
        if chunk.accesses <= _CHUNK:
            yield chunk
            continue
        offsets = chunk.offsets
        ra, nreq = 0, len(offsets) - 1
        while ra < nreq:
            rb = int(np.searchsorted(offsets, offsets[ra] + _CHUNK, side="right")) - 1
            rb = min(max(rb, ra + 1), nreq)
            pa, pb = int(offsets[ra]), int(offsets[rb])
            yield Chunk(offsets[ra : rb + 1] - pa, chunk.input_lengths[ra:rb], chunk.blocks[pa:pb])
            ra = rb


def sampled_curve(
    cols: TraceColumns, *, rate: float | None = None, size: int | None = None, seed: int = 0
) -> HitCurve:
    """A SHARDS estimate of the single-tier LRU hit curve (fixed rate, or fixed size: at most `size` blocks)."""
    return sampled_curve_stream(
        iter_chunks(cols), block_size=cols.block_size, rate=rate, size=size, seed=seed, id_bound=cols.id_bound
    )


def sampled_curve_stream(
    chunks: Iterable[Chunk],
    *,
    block_size: int,
    rate: float | None = None,
    size: int | None = None,
    seed: int = 0,
    id_bound: int = 1024,
) -> HitCurve:
    """SHARDS over a stream of request-aligned chunks; memory: one last-use position per block id, the
    sampled accesses, and at most QUERY_LIMIT lookup groups (not the trace)."""
    if (rate is None) == (size is None):
        raise BadInputError("give one of --sample-rate R and --sample-size N")
    if rate is not None and not 0 < rate <= 1:
        raise BadInputError(f"--sample-rate {rate}: must be in (0, 1]")
    if size is not None and size < 1:
        raise BadInputError(f"--sample-size {size}: must be at least 1 block")
    two64 = float(1 << 64)
    cut = np.uint64(min(int(rate * two64), (1 << 64) - 1)) if rate is not None else None
    last = _LastUse(id_bound)
    # Fixed size: the kept blocks (a max-heap on the hash), the threshold, and when each block left.
    threshold = 1 << 64
    kept: list[tuple[int, int]] = []
    entered: Any = np.zeros(max(id_bound, 1), dtype=bool)
    never = np.int64(1 << 62)
    leave: Any = np.full(max(id_bound, 1), never, dtype=np.int64)
    drop_at: list[int] = []
    drop_rate: list[float] = []
    # The lookups kept: all while under QUERY_LIMIT groups, then requests whose hash is under a halving cut.
    lookup_cut = 1 << 64
    groups: list[tuple[Any, ...]] = []
    group_count = 0
    sample_pos: list[Any] = []
    sample_blk: list[Any] = []
    pos0 = req0 = input_tokens = 0
    for chunk in _rechunk(chunks):
        blocks = chunk.blocks
        p = last.previous(blocks, pos0)
        lo_c, s_c, tok_c, share_c, req_c = _chunk_lookups(chunk, p, pos0, block_size)
        if lookup_cut < 1 << 64:
            keep = _hash64(req_c + req0, seed + 1) < np.uint64(lookup_cut)
            lo_c, s_c, tok_c, share_c, req_c = lo_c[keep], s_c[keep], tok_c[keep], share_c[keep], req_c[keep]
        groups.append((lo_c, s_c, tok_c, share_c, req_c + req0))
        group_count += len(lo_c)
        while group_count > QUERY_LIMIT:
            lookup_cut //= 2
            cutoff = np.uint64(lookup_cut)
            groups = [tuple(a[_hash64(g[4], seed + 1) < cutoff] for a in g) for g in groups]
            group_count = sum(len(g[0]) for g in groups)
        hashes = _hash64(blocks, seed)
        positions: Any = np.arange(pos0, pos0 + len(blocks), dtype=np.int64)
        if cut is not None:
            mask = hashes < cut
        else:
            assert size is not None
            top = int(blocks.max()) + 1
            if top > len(entered):
                grow = max(top, 2 * len(entered))
                entered = np.concatenate((entered, np.zeros(grow - len(entered), dtype=bool)))
                leave = np.concatenate((leave, np.full(grow - len(leave), never, dtype=np.int64)))
            new = np.flatnonzero((p < 0) & (hashes < np.uint64(min(threshold, (1 << 64) - 1))))
            new_at: list[int] = (new + pos0).tolist()
            for at, block, h in zip(new_at, blocks[new].tolist(), hashes[new].tolist(), strict=True):
                if h >= threshold:
                    continue
                entered[block] = True
                heapq.heappush(kept, (-h, block))
                if len(kept) > size:
                    neg, out = heapq.heappop(kept)
                    threshold = -neg
                    leave[out] = at
                    drop_at.append(at)
                    drop_rate.append(threshold / two64)
            mask = entered[blocks] & (leave[blocks] > positions)
        sample_pos.append(positions[mask])
        sample_blk.append(blocks[mask])
        pos0 += len(blocks)
        req0 += len(chunk.input_lengths)
        input_tokens += int(chunk.input_lengths.sum())
    if req0 == 0:
        raise BadInputError("no requests (empty trace)")
    n = pos0
    del last
    spos = np.concatenate(sample_pos)
    sblk = np.concatenate(sample_blk)
    del sample_pos, sample_blk
    # Points: a sampled block's consecutive sampled uses (q, next), the next capped at its leaving time - 1.
    order = np.argsort(sblk, kind="stable")
    same = np.flatnonzero(sblk[order][1:] == sblk[order][:-1])
    point_q = spos[order[same]]
    point_next = spos[order[same + 1]]
    if size is not None:
        leave[leave == never] = n
        point_next = np.minimum(point_next, leave[sblk[order[same]]] - 1)
    del order, same
    lo, q_s, tokens, share = (np.concatenate([g[i] for g in groups]) for i in range(4))
    del groups
    weight = lookup_cut / two64
    inside = np.searchsorted(spos, q_s) - np.searchsorted(spos, lo)
    inner = dominance_counts(point_q, point_next, lo, q_s)
    if size is None:
        assert rate is not None
        r: Any = np.full(len(lo), rate)
        final_rate = rate
    else:
        steps = np.concatenate(([1.0], np.asarray(drop_rate)))
        r = steps[np.searchsorted(np.asarray(drop_at, dtype=np.int64), q_s, side="right")]
        final_rate = float(steps[-1])
    # A window with no sampled block counts as half a sample (the estimate 0 would make every short-lived
    # prefix hit at every capacity), and no window holds more distinct blocks than its s - m - 1 positions.
    distinct_est = np.minimum(np.maximum(inside - inner, 0.5) / r, q_s - lo)
    del inside, inner, r, lo, q_s
    owned = [np.floor(distinct_est).astype(np.int64) + 1, tokens / weight, share / weight]
    del distinct_est, tokens, share
    return _curve(
        owned,
        block_size=block_size,
        requests=req0,
        input_tokens=input_tokens,
        accesses=n,
        method="shards-fixed-rate" if size is None else "shards-fixed-size",
        sample_rate=final_rate,
        sampled_blocks=len(np.unique(sblk)) if len(sblk) else 0,
        lookup_rate=weight,
    )


# --------------------------------------------------------------------------------------------------
# Reading a trace straight into columns


def load_columns(path: str, *, block_size: int, sort_by_time: bool = False) -> TraceColumns:
    """Stream a Mooncake JSONL trace (plain, gzip, zstd) into columns, without per-request Python tuples.

    The same validation and errors as `vramctl.tiers.trace.load_mooncake`; memory is the columns (8 bytes per
    block access and 16 per request) plus one dict entry per distinct hash id."""
    from array import array

    from vramctl.tiers.trace import _open_trace, _rows, _text_lines

    source = f"--trace {path}"
    ids: dict[object, int] = {}
    setdefault = ids.setdefault
    stamps = array("d")
    lengths = array("q")
    counts = array("q")
    flat = array("q")
    mismatched = 0
    handle = _open_trace(path, source)
    try:
        with handle:
            for ts, length, _out, raw_ids, _line in _rows(
                _text_lines(handle, source), block_size=block_size, source=source, sort_by_time=sort_by_time
            ):
                stamps.append(ts)
                lengths.append(length)
                counts.append(len(raw_ids))
                flat.extend([setdefault(h, len(ids)) for h in raw_ids])
                if len(raw_ids) != -(-length // block_size):
                    mismatched += 1
    except IsADirectoryError:
        raise BadInputError(f"{source}: is a directory, expected a JSONL file") from None
    except OSError as exc:
        raise BadInputError(f"{source}: cannot read ({exc.strerror or exc})") from None
    if not lengths:
        raise BadInputError(f"{source}: no requests (empty trace)")
    n_ids = len(ids)
    del ids
    length_arr: Any = np.frombuffer(lengths, dtype=np.int64).copy()
    count_arr: Any = np.frombuffer(counts, dtype=np.int64).copy()
    blocks: Any = _compact(np.frombuffer(flat, dtype=np.int64))
    del flat
    if sort_by_time:
        order = np.argsort(np.frombuffer(stamps, dtype=np.float64), kind="stable")
        starts = np.concatenate(([0], np.cumsum(count_arr)))[:-1]
        pick: Any = np.repeat(
            starts[order] - np.concatenate(([0], np.cumsum(count_arr[order])))[:-1], count_arr[order]
        )
        blocks = blocks[pick + np.arange(len(blocks), dtype=np.int64)]
        length_arr, count_arr = length_arr[order], count_arr[order]
    offsets: Any = np.zeros(len(count_arr) + 1, dtype=np.int64)
    np.cumsum(count_arr, out=offsets[1:])
    warnings: tuple[str, ...] = ()
    if mismatched:
        warnings = (
            f"{mismatched} of {len(length_arr)} requests have fewer hash ids than ceil(input_length / {block_size}): "
            f"their tail tokens can never hit; check --trace-block-size",
        )
    return TraceColumns(
        block_size=block_size,
        input_lengths=length_arr,
        offsets=offsets,
        blocks=blocks,
        num_unique_blocks=n_ids,
        source=source,
        warnings=warnings,
    )


class TraceStream:
    """A Mooncake trace file read as request-aligned chunks of about _CHUNK accesses (for the sampled curve):
    the trace is never held whole. The counts (`num_requests`, `input_tokens`, `num_unique_blocks`,
    `warnings`) are filled in once it has been iterated; hash ids go through one dictionary (distinct ids)."""

    def __init__(self, path: str, *, block_size: int) -> None:
        self.path = path
        self.block_size = block_size
        self.source = f"--trace {path}"
        self.num_requests = 0
        self.input_tokens = 0
        self.num_unique_blocks = 0
        self.warnings: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Chunk]:
        from array import array

        from vramctl.tiers.trace import _open_trace, _rows, _text_lines

        source, bs = self.source, self.block_size
        ids: dict[object, int] = {}
        setdefault = ids.setdefault
        mismatched = requests = tokens = 0
        lengths, counts, flat = array("q"), array("q"), array("q")

        def chunk() -> Chunk:
            offsets: Any = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(np.frombuffer(counts, dtype=np.int64), out=offsets[1:])
            return Chunk(
                offsets,
                np.frombuffer(lengths, dtype=np.int64).copy(),
                np.frombuffer(flat, dtype=np.int64).copy(),
            )

        handle = _open_trace(self.path, source)
        try:
            with handle:
                for _ts, length, _out, raw_ids, _line in _rows(
                    _text_lines(handle, source), block_size=bs, source=source, sort_by_time=False
                ):
                    lengths.append(length)
                    counts.append(len(raw_ids))
                    flat.extend([setdefault(h, len(ids)) for h in raw_ids])
                    requests += 1
                    tokens += length
                    if len(raw_ids) != -(-length // bs):
                        mismatched += 1
                    if len(flat) >= _CHUNK:
                        yield chunk()
                        lengths, counts, flat = array("q"), array("q"), array("q")
        except IsADirectoryError:
            raise BadInputError(f"{source}: is a directory, expected a JSONL file") from None
        except OSError as exc:
            raise BadInputError(f"{source}: cannot read ({exc.strerror or exc})") from None
        if not requests:
            raise BadInputError(f"{source}: no requests (empty trace)")
        if counts:
            yield chunk()
        self.num_requests, self.input_tokens, self.num_unique_blocks = requests, tokens, len(ids)
        if mismatched:
            self.warnings = (
                f"{mismatched} of {requests} requests have fewer hash ids than ceil(input_length / {bs}): "
                f"their tail tokens can never hit; check --trace-block-size",
            )


# --------------------------------------------------------------------------------------------------
# Shards in local processes


def _count_shard(part: tuple[Any, Any], lo: Any, s: Any) -> Any:
    return dominance_counts(part[0], part[1], lo, s)


def _context() -> Any:
    """fork where there is one (the arrays are inherited, __main__ is not re-imported); spawn elsewhere."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def local_runner(workers: int, fn: Callable[..., Any] = _count_shard) -> ShardRunner:
    """Run the shards on `workers` local processes; a shard whose process dies is retried once in a fresh
    pool; a second failure is a ShardFailedError (no partial curve)."""

    def run(shards: Sequence[tuple[Any, Any]], lo: Any, s: Any) -> list[Any]:
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        results: dict[int, Any] = {}
        todo = list(range(len(shards)))
        for attempt in (1, 2):
            failed: list[tuple[int, str]] = []
            with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
                futures = {k: pool.submit(fn, shards[k], lo, s) for k in todo}
                for k, future in futures.items():
                    try:
                        results[k] = future.result()
                    except BrokenProcessPool:
                        failed.append((k, "its worker process died"))
                    except MemoryError:
                        failed.append((k, "out of memory"))
            if not failed:
                break
            todo = [k for k, _ in failed]
            if attempt == 2:
                k, why = failed[0]
                raise ShardFailedError(
                    f"--workers {workers}: shard {k + 1} of {len(shards)} failed twice ({why}); no partial curve "
                    "is reported (retry with fewer --workers, or --sample-rate to use less memory)"
                )
        return [results[k] for k in range(len(shards))]

    return run
