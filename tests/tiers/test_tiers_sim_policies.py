"""Write policies, thresholds, hierarchies and eviction policies on small traces worked out by hand."""

from __future__ import annotations

import json

import pytest

from vramctl.tiers.policies import ARCCache, LFUCache, LRUCache
from vramctl.tiers.simulate import (
    EXCLUSIVE,
    LAZY,
    WRITE_BACK,
    WRITE_THROUGH,
    WRITE_THROUGH_SELECTIVE,
    SimConfig,
    SimResult,
    TierConfig,
    simulate,
)
from vramctl.tiers.trace import Trace, parse_mooncake_lines


def trace_of(requests: list[list[str]], *, bs: int = 16, lengths: list[int] | None = None) -> Trace:
    lines = []
    for i, blocks in enumerate(requests):
        length = lengths[i] if lengths else len(blocks) * bs
        lines.append(
            json.dumps({"timestamp": i, "input_length": length, "output_length": 1, "hash_ids": blocks})
        )
    return parse_mooncake_lines(lines, block_size=bs)


# Four requests, 16-token blocks, a GPU tier of 2 blocks and a host tier of 10 blocks:
#   r0 [A B]   r1 [C D]   r2 [A B]   r3 [E F]
# r1 evicts A, B from the GPU; r2 finds them on the host only if the write policy put them there.
ABCD = trace_of([["A", "B"], ["C", "D"], ["A", "B"], ["E", "F"]])
TWO_TIERS = (TierConfig("gpu", 32), TierConfig("host", 160))


def run(policy: str, *, hierarchy: str = "inclusive", trace: Trace = ABCD, **kw: int) -> SimResult:
    return simulate(trace, SimConfig(tiers=TWO_TIERS, write_policy=policy, hierarchy=hierarchy, **kw))  # type: ignore[arg-type]


def host(result: SimResult) -> tuple[int, int]:
    tier = result.tier("host")
    assert tier is not None
    return tier.hit_tokens, tier.written_tokens


def test_write_through_copies_every_block_when_it_is_computed() -> None:
    # SGLang's insert counts the new node as a hit (threshold 1): A,B (r0), C,D (r1), E,F (r3) are written;
    # r2 loads A,B (32 tokens) back from the host.
    r = run(WRITE_THROUGH)
    assert host(r) == (32, 6 * 16)
    assert r.tiers[0].hit_tokens == 0
    assert r.token_hit_rate == pytest.approx(32 / 128)
    assert r.tiers[0].written_tokens == 128  # every token computed or loaded into HBM


def test_write_through_selective_waits_for_a_second_use() -> None:
    # Every block is used once before the GPU evicts it: nothing reaches the host, nothing hits.
    assert host(run(WRITE_THROUGH_SELECTIVE)) == (0, 0)
    # A fifth request reusing E,F while they are still on the GPU makes their count 2: they are copied.
    trace = trace_of([["A", "B"], ["C", "D"], ["A", "B"], ["E", "F"], ["E", "F"]])
    r = run(WRITE_THROUGH_SELECTIVE, trace=trace)
    assert host(r) == (0, 32)
    assert r.tiers[0].hit_tokens == 32


def test_write_through_selective_backs_up_the_ancestors_first() -> None:
    # GPU 3 blocks. r0 [A B] (counts 1,1); r1 [A C]: A reaches 2 -> backed up; C is new (1).
    # r2 [A B]: A 3, B 2 -> B backed up (A already). Host: A, B = 32 tokens written.
    trace = trace_of([["A", "B"], ["A", "C"], ["A", "B"]])
    r = simulate(
        trace,
        SimConfig(
            tiers=(TierConfig("gpu", 48), TierConfig("host", 160)), write_policy=WRITE_THROUGH_SELECTIVE
        ),
    )
    assert host(r) == (0, 32)
    assert r.tiers[0].hit_tokens == 16 + 32


def test_write_back_stages_blocks_only_when_the_gpu_evicts_them() -> None:
    # r1 evicts A,B -> staged (32); r2 loads A,B from the host and evicts C,D -> staged (64);
    # r3 evicts A,B again, but their host copies were kept (inclusive): nothing more is written.
    assert host(run(WRITE_BACK)) == (32, 64)


def test_exclusive_demotes_on_evict_and_promotes_on_hit() -> None:
    # As write_back, but r2's load removes A,B from the host, so r3's eviction writes them again.
    r = run(WRITE_BACK, hierarchy=EXCLUSIVE)
    assert host(r) == (32, 96)
    assert r.tiers[1].peak_used_blocks == 4


def test_lazy_offloads_blocks_near_eviction() -> None:
    # Window 2 blocks, a step = 1 block: before each insertion the cursor copies the (at most 2) GPU blocks
    # nearest eviction. r0: A (before B); r1: B (start), C (before D); r2: D (start), then A,B are on the
    # host -> 32 hit; r3: E (before F). Written: A B C D E = 80 tokens.
    assert host(run(LAZY, lazy_window_tokens=32)) == (32, 80)


def test_no_host_tier_means_no_host_hits() -> None:
    r = simulate(ABCD, SimConfig(tiers=(TierConfig("gpu", 32),)))
    assert r.hit_tokens == 0 and len(r.tiers) == 1


def test_load_back_threshold() -> None:
    # 4-token blocks, GPU holds 1 block. r2's prefix A (4 tokens) is on the host only: under SGLang's
    # 10-token load-back threshold it is recomputed; with the threshold at 4 it is loaded.
    trace = trace_of([["A"], ["B"], ["A"]], bs=4)
    tiers = (TierConfig("gpu", 4), TierConfig("host", 400))
    assert simulate(trace, SimConfig(tiers=tiers)).hit_tokens == 0
    loaded = simulate(trace, SimConfig(tiers=tiers, load_back_threshold=4))
    assert host(loaded) == (4, 8)


def test_prefetch_threshold_for_the_disk_tier() -> None:
    # 100-token blocks; GPU 1 block, host 1 block, disk unlimited, write-through (every host write goes
    # through to disk). After r0 [A B]: GPU {B}, host {B} (A's host copy evicted for B), disk {A, B}.
    # r1 [A B]: A is on disk only, B on the GPU; the L3 segment is 200 tokens < 256: revoked, no hit.
    trace = trace_of([["A", "B"], ["A", "B"]], bs=100)
    tiers = (TierConfig("gpu", 100), TierConfig("host", 100), TierConfig("disk", None))
    revoked = simulate(trace, SimConfig(tiers=tiers))
    assert revoked.hit_tokens == 0
    assert revoked.tier("disk").written_tokens == 200  # type: ignore[union-attr]
    taken = simulate(trace, SimConfig(tiers=tiers, prefetch_threshold=200))
    assert taken.tier("disk").hit_tokens == 100  # type: ignore[union-attr]
    assert taken.tier("gpu").hit_tokens == 100  # type: ignore[union-attr]
    assert taken.hit_tokens == 200


def test_partial_last_block_counts_only_its_tokens() -> None:
    # input 20 tokens in two 16-token blocks: the second holds 4 tokens.
    trace = trace_of([["A", "B"], ["A", "B"]], lengths=[20, 20])
    r = simulate(trace, SimConfig(tiers=(TierConfig("gpu", None),)))
    assert r.hit_tokens == 20 and r.token_hit_rate == pytest.approx(0.5)


def test_prefix_rule_a_block_after_a_miss_does_not_count() -> None:
    trace = trace_of([["A", "B", "C"], ["X", "B", "C"]])
    assert simulate(trace, SimConfig(tiers=(TierConfig("gpu", None),))).hit_tokens == 0


def test_request_hit_rate_is_the_mean_of_ratios() -> None:
    # r1 hits 16 of 16 tokens (1.0); r0 0; r2 hits 16 of 64 (0.25): mean 1.25/3, token-weighted 32/96.
    trace = trace_of([["A"], ["A"], ["A", "B", "C", "D"]])
    r = simulate(trace, SimConfig(tiers=(TierConfig("gpu", None),)))
    assert r.request_hit_rate == pytest.approx(1.25 / 3)
    assert r.token_hit_rate == pytest.approx(32 / 96)


# ---- eviction policies ---------------------------------------------------------------------------


def test_lru_order() -> None:
    c = LRUCache(2)
    c.admit(1)
    c.admit(2)
    c.touch(1)
    assert c.admit(3) == (True, [2])
    assert 1 in c and 3 in c


def test_lru_respects_pins_and_refuses_when_everything_is_pinned() -> None:
    c = LRUCache(2)
    c.admit(1)
    c.admit(2)
    assert c.admit(3, pinned={1}) == (True, [2])
    assert c.admit(4, pinned={1, 3}) == (False, [])
    assert LRUCache(0).admit(1) == (False, [])


def test_lfu_evicts_the_least_used_then_the_oldest() -> None:
    c = LFUCache(3)
    for b in (1, 2, 3):
        c.admit(b)
    c.touch(1)
    c.touch(1)
    c.touch(3)
    assert c.admit(4) == (True, [2])
    assert c.admit(5) == (True, [4])  # 4 has count 1, older than nothing else with count 1
    assert sorted(c.eviction_order()) == [1, 3, 5]


def test_arc_keeps_the_frequent_set_under_a_scan() -> None:
    c = ARCCache(4)
    for b in (1, 2):
        c.admit(b)
        c.touch(b)  # 1, 2 are now in T2 (frequent)
    for b in range(100, 120):  # a one-pass scan
        c.admit(b)
    assert 1 in c and 2 in c
    assert len(c) == 4


def test_arc_ghost_hit_adapts() -> None:
    c = ARCCache(2)
    c.admit(1)
    c.admit(2)
    ok, out = c.admit(3)
    assert ok and out == [1]  # 1 goes to ghost B1
    ok, out = c.admit(1)  # a ghost hit: p grows, 1 re-enters as frequent
    assert ok and 1 in c and len(c) == 2


@pytest.mark.parametrize("eviction", ["lru", "lfu", "arc"])
def test_every_policy_runs_two_tiers(eviction: str) -> None:
    trace = trace_of([[*"ABCD"], [*"ABEF"], [*"ABCD"], [*"GH"], [*"ABCD"]])
    r = simulate(trace, SimConfig(tiers=(TierConfig("gpu", 64), TierConfig("host", 128)), eviction=eviction))
    assert 0 < r.token_hit_rate <= 1
    assert r.hit_tokens == sum(t.hit_tokens for t in r.tiers)
    assert r.tiers[0].peak_used_blocks <= 4 and r.tiers[1].peak_used_blocks <= 8


def test_exclusive_three_tiers_demote_down_the_chain() -> None:
    # GPU 1 block, host 1 block, disk unlimited, 16-token blocks. r1 demotes A to the host; r2 demotes B to the
    # host, which pushes A down to disk. r3 finds A on disk only: 16 tokens < the 256-token prefetch threshold
    # (revoked); with the threshold at 0 it is prefetched and leaves the disk (one copy).
    trace = trace_of([["A"], ["B"], ["C"], ["A"]])
    tiers = (TierConfig("gpu", 16), TierConfig("host", 16), TierConfig("disk", None))
    base = SimConfig(tiers=tiers, hierarchy=EXCLUSIVE, write_policy=WRITE_BACK)
    revoked = simulate(trace, base)
    assert revoked.hit_tokens == 0
    disk = revoked.tier("disk")
    assert (
        disk is not None and disk.written_tokens == 16 + 16
    )  # A, then B (pushed down by r3's demotion of C)
    taken = simulate(
        trace, SimConfig(tiers=tiers, hierarchy=EXCLUSIVE, write_policy=WRITE_BACK, prefetch_threshold=0)
    )
    disk = taken.tier("disk")
    assert disk is not None and disk.hit_tokens == 16 and taken.hit_tokens == 16
