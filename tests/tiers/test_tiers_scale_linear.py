"""`tiers simulate` stays linear with an unlimited (or large) GPU tier and a host tier.

SGLang's host pool never evicts the copy of a block still on the GPU; with every host block pinned, the old
LRU scanned the whole host order on each admission (the Mooncake conversation trace took 102 s with the
default `--gpu-capacity unlimited` plus `--host-capacity`). The host now finds its victim in O(log n).
"""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.tiers.policies import LRUCache, PinnedLRUCache
from vramctl.tiers.simulate import SimConfig, TierConfig, simulate
from vramctl.tiers.trace import SyntheticSpec, synthetic_trace


def _cpu(fn: object) -> float:
    start = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - start


def test_unlimited_gpu_with_a_host_tier_costs_about_a_gpu_only_replay() -> None:
    trace = synthetic_trace(SyntheticSpec(sessions=400, turns=5, system=2048, seed=3), block_size=64)
    gpu_only = SimConfig(tiers=(TierConfig("gpu", None),))
    with_host = SimConfig(tiers=(TierConfig("gpu", None), TierConfig("host", 64 * 500)))
    simulate(trace, gpu_only)  # warm up
    base = min(_cpu(lambda: simulate(trace, gpu_only)) for _ in range(3))
    tiered = min(_cpu(lambda: simulate(trace, with_host)) for _ in range(2))
    # Linear: a host tier adds a bounded amount of work per block (measured ~8x); the scan was ~100x.
    assert tiered < 25 * base + 0.05, (tiered, base)
    # Every host block is pinned by the unlimited GPU tier: nothing is ever evicted from the host.
    result = simulate(trace, with_host)
    host = result.tier("host")
    assert host is not None and host.evicted_blocks == 0 and host.peak_used_blocks == 500


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["admit", "touch", "pin", "unpin", "discard"]), st.integers(0, 12)),
        max_size=80,
    ),
    capacity=st.integers(1, 6),
)
def test_pinned_lru_evicts_exactly_like_the_scanning_lru(ops: list[tuple[str, int]], capacity: int) -> None:
    pins: dict[int, None] = {}
    fast = PinnedLRUCache(capacity, pins)
    slow = LRUCache(capacity)
    for op, block in ops:
        if op == "admit" and block not in slow:
            assert fast.admit(block) == slow.admit(block, pins)
        elif op == "touch" and block in slow:
            fast.touch(block)
            slow.touch(block)
        elif op == "pin":
            pins[block] = None
        elif op == "unpin" and block in pins:
            del pins[block]
            fast.unpinned(block)
        elif op == "discard":
            fast.discard(block)
            slow.discard(block)
        assert list(fast.eviction_order()) == list(slow.eviction_order())
