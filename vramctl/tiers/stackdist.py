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
from collections.abc import Callable, Sequence
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
    """int64[N]: dense block ids (0..num_unique_blocks-1)."""
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


def columns_of(trace: Trace) -> TraceColumns:
    """The columns of an in-memory trace."""
    counts = np.fromiter((len(b) for b in trace.blocks), dtype=np.int64, count=trace.num_requests)
    offsets: Any = np.zeros(trace.num_requests + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    blocks = np.fromiter((x for b in trace.blocks for x in b), dtype=np.int64, count=int(offsets[-1]))
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
    counts = np.asarray(block_counts, dtype=np.int64)
    if len(lengths) == 0:
        raise BadInputError(f"{source or 'trace'}: no requests (empty trace)")
    if (lengths < 1).any() or (counts < 1).any() or ((counts - 1) * block_size >= lengths).any():
        raise BadInputError(
            f"{source or 'trace'}: every request needs 1..ceil(input_length / block_size) blocks"
        )
    offsets: Any = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    raw = np.asarray(blocks, dtype=np.int64)
    if len(raw) != offsets[-1]:
        raise BadInputError(f"{source or 'trace'}: {len(raw)} block ids for {int(offsets[-1])} block slots")
    uniq, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    rank: Any = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq), dtype=np.int64)
    return TraceColumns(
        block_size=block_size,
        input_lengths=lengths,
        offsets=offsets,
        blocks=rank[inverse.reshape(-1)],
        num_unique_blocks=len(uniq),
        source=source,
    )


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


def _curve(dist: Any, tokens: Any, share: Any, cols: TraceColumns, **extra: Any) -> HitCurve:
    order = np.argsort(dist, kind="stable")
    d = dist[order]
    ct = np.cumsum(tokens[order])
    cs = np.cumsum(share[order])
    if len(d):
        last = np.flatnonzero(np.append(d[1:] != d[:-1], True))
        d, ct, cs = d[last], ct[last], cs[last]
    return HitCurve(
        block_size=cols.block_size,
        requests=cols.num_requests,
        input_tokens=cols.input_tokens,
        distances=d,
        cum_tokens=ct,
        cum_request_share=cs,
        accesses=cols.num_accesses,
        **extra,
    )


def _request_index(cols: TraceColumns) -> Any:
    return np.repeat(np.arange(cols.num_requests, dtype=np.int64), np.diff(cols.offsets))


def _previous_uses(blocks: Any) -> tuple[Any, Any]:
    """(prev, next) flat positions of each access's block's previous / next use; -1 / N where none."""
    n = len(blocks)
    order = np.argsort(blocks, kind="stable")
    sorted_blocks = blocks[order]
    same = np.flatnonzero(sorted_blocks[1:] == sorted_blocks[:-1])
    del sorted_blocks
    prev: Any = np.full(n, -1, dtype=np.int64)
    nxt: Any = np.full(n, n, dtype=np.int64)
    later, earlier = order[same + 1], order[same]
    prev[later] = earlier
    nxt[earlier] = later
    return prev, nxt


def _lookup_state(cols: TraceColumns, prev: Any) -> tuple[Any, Any, Any]:
    """Per access: (request start s, m = running min of the before-request previous uses, valid mask).

    An access is valid (can hit at some capacity) iff no block up to it in its request is new. A block
    repeated inside one request looks up the previous use before the request, like its first copy."""
    req = _request_index(cols)
    s = cols.offsets[:-1][req]
    e = prev.copy()
    inside = e >= s
    while inside.any():
        e[inside] = e[e[inside]]
        inside = e >= s
    cold = np.cumsum(e < 0)
    start_cold = np.concatenate(([0], cold))[cols.offsets[:-1]]
    valid = cold == start_cold[req]
    big = len(e) + 2
    top = cols.num_requests
    m = np.minimum.accumulate(np.where(valid, e, big - 1) + (top - req) * big) - (top - req) * big
    return s, m, valid


QUERY_LIMIT = 4_000_000
"""A sampled curve weighs every lookup up to this many (request, prefix-minimum) groups, a uniform sample of
them beyond (each then weighs 1 / the lookup rate)."""


def _groups(cols: TraceColumns, valid: Any, m: Any, s: Any) -> tuple[Any, Any, Any, Any]:
    """The valid accesses grouped into runs with the same request and prefix minimum (one count answers a run):
    (lo = m + 1, request start s, Σ tokens, Σ tokens / input length) per run."""
    idx = np.flatnonzero(valid)
    req: Any = np.searchsorted(cols.offsets, idx, side="right") - 1
    length = cols.input_lengths[req]
    tokens = np.minimum(cols.block_size, length - (idx - cols.offsets[req]) * cols.block_size)
    share = tokens / length
    mm = m[idx]
    start: Any = np.ones(len(idx), dtype=bool)
    start[1:] = (req[1:] != req[:-1]) | (mm[1:] != mm[:-1])
    heads = np.flatnonzero(start)
    return (
        mm[heads] + 1,
        s[idx[heads]],
        np.add.reduceat(tokens, heads) if len(heads) else tokens[:0],
        np.add.reduceat(share, heads) if len(heads) else share[:0],
    )


def dominance_counts(point_q: Any, point_next: Any, lo: Any, s: Any) -> tuple[Any, Any]:
    """For each query j: (#{i: next_i < s_j}, #{i: q_i < lo_j and next_i < s_j}) over the points (q_i, next_i).

    q, next, lo, s are non-negative int64 below 2^31. Fenwick decomposition of [0, lo) into aligned blocks,
    one sorted key array (q >> k, next) per bit k; each level is a stable sort of the previous (merging runs)."""
    lt: Any = np.zeros(len(lo), dtype=np.int64)
    le: Any = np.zeros(len(lo), dtype=np.int64)
    if len(point_q) == 0 or len(lo) == 0:
        return lt, le
    lt += np.searchsorted(np.sort(point_next), s)
    scale = np.int64(max(int(point_next.max()), int(s.max())) + 1)
    key = np.sort(point_q.astype(np.int64) * scale + point_next)
    top = int(lo.max())
    k = 0
    while (1 << k) <= top:
        bit = ((lo >> k) & 1).astype(bool)
        if bit.any():
            base = ((lo[bit] >> k) - 1) * scale
            le[bit] += np.searchsorted(key, base + s[bit]) - np.searchsorted(key, base)
        k += 1
        block = key // scale
        key = np.sort((block >> 1) * scale + (key - block * scale), kind="stable")
    return lt, le


def _shard_of(blocks: Any, shards: int) -> Any:
    return (_hash64(blocks) >> np.uint64(32)) % np.uint64(shards)


def _hash64(blocks: Any, seed: int = 0) -> Any:
    """splitmix64 of the block ids (uint64): a spatial hash, uniform whatever the id order."""
    with np.errstate(over="ignore"):
        x = blocks.astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (seed + 1)) & _MASK64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


ShardRunner = Callable[[Sequence[tuple[Any, Any]], Any, Any], list[tuple[Any, Any]]]
"""Runs dominance_counts on each (points q, points next) shard for the same queries (lo, s)."""


def _in_process(shards: Sequence[tuple[Any, Any]], lo: Any, s: Any) -> list[tuple[Any, Any]]:
    return [dominance_counts(q, n, lo, s) for q, n in shards]


def exact_curve(cols: TraceColumns, *, shards: int = 1, runner: ShardRunner | None = None) -> HitCurve:
    """The exact single-tier LRU hit curve (identical to a replay at every capacity)."""
    n = cols.num_accesses
    if n >= 1 << 31:
        raise BadInputError(
            f"{cols.source or 'trace'}: {n:,} block accesses; at most 2^31 - 1 (use --sample-rate)"
        )
    prev, nxt = _previous_uses(cols.blocks)
    s, m, valid = _lookup_state(cols, prev)
    del prev
    lo, q_s, tokens, share = _groups(cols, valid, m, s)
    del m, s, valid
    has_next = np.flatnonzero(nxt < n)
    point_next = nxt[has_next]
    del nxt
    if shards <= 1:
        parts = [(has_next, point_next)]
    else:
        which = _shard_of(cols.blocks[has_next], shards)
        parts = [(has_next[which == k], point_next[which == k]) for k in range(shards)]
    del has_next, point_next
    counts = (runner or _in_process)(parts, lo, q_s)
    lt = sum(c[0] for c in counts)
    le = sum(c[1] for c in counts)
    distinct = (q_s - lo) - (lt - le)
    return _curve(distinct + 1, tokens, share, cols)


# --------------------------------------------------------------------------------------------------
# SHARDS


def _fixed_size_threshold(cols: TraceColumns, hashes: Any, size: int) -> tuple[Any, Any, Any]:
    """Fixed-size SHARDS: per block, the flat position where it leaves the sample (n: never; -1: never in),
    and the threshold drops as (positions, rates). The threshold starts at 2^64 and drops to the largest
    kept hash when a new block would make the sample exceed `size` blocks."""
    n = cols.num_accesses
    order = np.argsort(cols.blocks, kind="stable")
    head = np.flatnonzero(np.concatenate(([True], cols.blocks[order][1:] != cols.blocks[order][:-1])))
    first: Any = np.full(cols.num_unique_blocks, n, dtype=np.int64)
    first[cols.blocks[order[head]]] = order[head]
    del order, head
    block_hash: Any = np.zeros(cols.num_unique_blocks, dtype=np.uint64)
    block_hash[cols.blocks] = hashes
    leave: Any = np.full(cols.num_unique_blocks, n, dtype=np.int64)
    threshold = 1 << 64
    kept: list[tuple[int, int]] = []  # max-heap of (-hash, block)
    drop_at: list[int] = []
    drop_rate: list[float] = []
    by_first = np.argsort(first, kind="stable")
    for block, h in zip(by_first.tolist(), block_hash[by_first].tolist(), strict=True):
        if h >= threshold:
            leave[block] = -1
            continue
        heapq.heappush(kept, (-h, block))
        if len(kept) > size:
            neg, out = heapq.heappop(kept)
            threshold = -neg
            leave[out] = first[block] if out != block else -1
            drop_at.append(int(first[block]))
            drop_rate.append(threshold / float(1 << 64))
    return leave, np.asarray(drop_at, dtype=np.int64), np.asarray(drop_rate, dtype=np.float64)


def sampled_curve(
    cols: TraceColumns, *, rate: float | None = None, size: int | None = None, seed: int = 0
) -> HitCurve:
    """A SHARDS estimate of the single-tier LRU hit curve (fixed rate, or fixed size: at most `size` blocks)."""
    if (rate is None) == (size is None):
        raise BadInputError("give one of --sample-rate R and --sample-size N")
    if rate is not None and not 0 < rate <= 1:
        raise BadInputError(f"--sample-rate {rate}: must be in (0, 1]")
    if size is not None and size < 1:
        raise BadInputError(f"--sample-size {size}: must be at least 1 block")
    n = cols.num_accesses
    prev, _nxt = _previous_uses(cols.blocks)
    del _nxt
    s, m, valid = _lookup_state(cols, prev)
    del prev
    hashes = _hash64(cols.blocks, seed)
    if rate is not None:
        cut = np.uint64(min(int(rate * float(1 << 64)), (1 << 64) - 1))
        sampled = hashes < cut
        leave_at = None
        final_rate = rate
        rate_at: Any = np.full(n, rate)
    else:
        assert size is not None
        leave, drop_at, drop_rate = _fixed_size_threshold(cols, hashes, size)
        leave_at = leave[cols.blocks]
        sampled = leave_at > np.arange(n, dtype=np.int64)
        # The rate in force at each position: the threshold after the last drop at or before it.
        steps = np.concatenate(([1.0], drop_rate))
        rate_at = steps[np.searchsorted(drop_at, np.arange(n, dtype=np.int64), side="right")]
        final_rate = float(steps[-1])
    del hashes
    sidx = np.flatnonzero(sampled)
    # Points: uses of sampled blocks, paired with the block's next sampled use (or its leaving time).
    sub_blocks = cols.blocks[sidx]
    order = np.argsort(sub_blocks, kind="stable")
    same = np.flatnonzero(sub_blocks[order][1:] == sub_blocks[order][:-1])
    nxt: Any = np.full(len(sidx), n, dtype=np.int64)
    nxt[order[same]] = sidx[order[same + 1]]
    if leave_at is not None:
        nxt = np.minimum(nxt, leave_at[sidx] - 1)
    del order, same, sub_blocks
    lo, q_s, tokens, share = _groups(cols, valid, m, s)
    del m, s, valid
    weight = 1.0
    if len(lo) > QUERY_LIMIT:
        # Hit weights from a uniform sample of the lookups (independent of the block sample).
        weight = QUERY_LIMIT / len(lo)
        pick = np.flatnonzero(
            _hash64(np.arange(len(lo), dtype=np.int64), seed + 1) < np.uint64(int(weight * 2.0**64))
        )
        lo, q_s, tokens, share = lo[pick], q_s[pick], tokens[pick], share[pick]
    counted = np.concatenate(([0], np.cumsum(sampled)))
    inside = counted[q_s] - counted[lo]
    keep = nxt < n
    lt, le = dominance_counts(sidx[keep], nxt[keep], lo, q_s)
    r = rate_at[q_s]
    distinct_est = (inside - (lt - le)) / r
    sampled_blocks = len(np.unique(cols.blocks[sidx])) if len(sidx) else 0
    return _curve(
        np.floor(distinct_est).astype(np.int64) + 1,
        tokens / weight,
        share / weight,
        cols,
        method="shards-fixed-rate" if size is None else "shards-fixed-size",
        sample_rate=final_rate,
        sampled_blocks=sampled_blocks,
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
    blocks: Any = np.frombuffer(flat, dtype=np.int64).copy()
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
            f"their tail tokens can never hit; check --block-size",
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


# --------------------------------------------------------------------------------------------------
# Shards in local processes


def _count_shard(part: tuple[Any, Any], lo: Any, s: Any) -> tuple[Any, Any]:
    return dominance_counts(part[0], part[1], lo, s)


def _context() -> Any:
    """fork where there is one (the arrays are inherited, __main__ is not re-imported); spawn elsewhere."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def local_runner(workers: int, fn: Callable[..., tuple[Any, Any]] = _count_shard) -> ShardRunner:
    """Run the shards on `workers` local processes; a shard whose process dies is retried once in a fresh
    pool; a second failure is a ShardFailedError (no partial curve)."""

    def run(shards: Sequence[tuple[Any, Any]], lo: Any, s: Any) -> list[tuple[Any, Any]]:
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        results: dict[int, tuple[Any, Any]] = {}
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
