"""Eviction policies for one cache tier, in blocks: LRU, LFU and ARC.

Every policy offers the same small interface the simulator drives:
- `b in cache`, `len(cache)`;
- `touch(b)`: b is present and was used again;
- `admit(b, pinned)`: insert a new block, evicting as needed; returns (admitted, evicted_blocks). A block
  in `pinned` is never chosen as a victim (SGLang never drops the host copy of a node that is still on
  the device: `evict_host` skips non-evicted nodes, `python/sglang/srt/mem_cache/memory_pool_host.py` (SGLang v0.5.23)); when every candidate is pinned
  the block is not admitted;
- `discard(b)`: remove b without counting an eviction (promotion in an exclusive hierarchy);
- `eviction_order()`: the blocks in the order they would be evicted (vLLM's lazy-offload cursor walks the
  GPU free queue in this order, `vllm/v1/kv_offload/` (vLLM v0.33.0)).
`capacity` is in blocks; None means unlimited.

- LRU: an OrderedDict (vLLM's free-block queue and SGLang's radix `last_access_time` are both LRU).
- LFU: least hit count first, least recently used among equals (SGLang `--radix-eviction-policy lfu`
  orders by (hit_count, last_access_time)); a heap with lazy deletion.
- ARC: Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST 2003 (vLLM's offload
  `cpu/policies/arc.py` implements it): recency list T1, frequency list T2, ghost lists B1/B2 and the
  adaptive target p.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Container, Iterator
from typing import Protocol

EVICTION_POLICIES: tuple[str, ...] = ("lru", "lfu", "arc")


class TierCache(Protocol):
    capacity: int | None

    @property
    def members(self) -> Container[int]:
        """The resident blocks, as a container with a C-speed `in` (a dict)."""
        ...

    def __contains__(self, block: object) -> bool: ...

    def __len__(self) -> int: ...

    def touch(self, block: int) -> None: ...

    def admit(self, block: int, pinned: Container[int] | None = None) -> tuple[bool, list[int]]: ...

    def discard(self, block: int) -> None: ...

    def eviction_order(self) -> Iterator[int]: ...


class LRUCache:
    __slots__ = ("_d", "capacity", "touch")

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self._d: OrderedDict[int, None] = OrderedDict()
        self.touch: Callable[[int], None] = self._d.move_to_end
        """b is present and was used again (the OrderedDict's own move_to_end: C speed)."""

    def __contains__(self, block: object) -> bool:
        return block in self._d

    def __len__(self) -> int:
        return len(self._d)

    @property
    def members(self) -> Container[int]:
        return self._d

    def admit(self, block: int, pinned: Container[int] | None = None) -> tuple[bool, list[int]]:
        d = self._d
        cap = self.capacity
        evicted: list[int] = []
        if cap is not None and len(d) >= cap:
            if cap <= 0:
                return False, evicted
            while len(d) >= cap:
                victim = next(iter(d))
                if pinned is not None and victim in pinned:
                    found = next((b for b in d if b not in pinned), None)
                    if found is None:
                        return False, evicted
                    victim = found
                    del d[victim]
                else:
                    d.popitem(last=False)
                evicted.append(victim)
        d[block] = None
        return True, evicted

    def discard(self, block: int) -> None:
        self._d.pop(block, None)

    def eviction_order(self) -> Iterator[int]:
        return iter(self._d)


class PinnedLRUCache:
    """LRU whose victim is the least recently used block *not* in `pinned`, found in O(log n).

    SGLang's host pool never drops the copy of a node still on the device; with a large (or unlimited) GPU
    tier most host blocks are pinned, and scanning the LRU order past them on every admission made a replay
    quadratic. Here every host block that is not on the GPU has an entry (its recency stamp) in a heap; the
    simulator calls `unpinned(b)` when the GPU drops a block the host holds. Entries whose block was touched
    again, removed, or is back on the GPU are stale and skipped when popped. The victims are exactly those
    of `LRUCache.admit(block, pinned)`.
    """

    __slots__ = ("_d", "_heap", "_pinned", "_tick", "capacity")

    def __init__(self, capacity: int | None, pinned: Container[int]) -> None:
        self.capacity = capacity
        self._d: dict[int, int] = {}
        """block -> recency stamp (larger is more recent)."""
        self._heap: list[tuple[int, int]] = []
        self._pinned = pinned
        self._tick = 0

    def __contains__(self, block: object) -> bool:
        return block in self._d

    def __len__(self) -> int:
        return len(self._d)

    @property
    def members(self) -> Container[int]:
        return self._d

    def _stamp(self, block: int) -> None:
        self._tick += 1
        self._d[block] = self._tick
        if block not in self._pinned:
            self._push(self._tick, block)

    def _push(self, stamp: int, block: int) -> None:
        heap = self._heap
        heapq.heappush(heap, (stamp, block))
        if len(heap) > 4 * len(self._d) + 64:
            pinned = self._pinned
            self._heap = [(s, b) for b, s in self._d.items() if b not in pinned]
            heapq.heapify(self._heap)

    def touch(self, block: int) -> None:
        self._stamp(block)

    def unpinned(self, block: int) -> None:
        """`block` left the pinning tier: it becomes a candidate victim again (at its own recency)."""
        stamp = self._d.get(block)
        if stamp is not None:
            self._push(stamp, block)

    def admit(self, block: int, pinned: Container[int] | None = None) -> tuple[bool, list[int]]:
        """`pinned` is ignored: the cache's own pinning container decides."""
        cap = self.capacity
        evicted: list[int] = []
        if cap is not None and len(self._d) >= cap:
            if cap <= 0:
                return False, evicted
            d, heap, pins = self._d, self._heap, self._pinned
            while len(d) >= cap:
                victim = None
                while heap:
                    stamp, b = heapq.heappop(heap)
                    if d.get(b) == stamp and b not in pins:
                        victim = b
                        break
                if victim is None:
                    return False, evicted
                del d[victim]
                evicted.append(victim)
        self._stamp(block)
        return True, evicted

    def discard(self, block: int) -> None:
        self._d.pop(block, None)

    def eviction_order(self) -> Iterator[int]:
        return iter(sorted(self._d, key=self._d.__getitem__))


class LFUCache:
    __slots__ = ("_counter", "_entries", "_heap", "capacity")

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self._entries: dict[int, tuple[int, int]] = {}
        self._heap: list[tuple[int, int, int]] = []
        self._counter = itertools.count()

    def __contains__(self, block: object) -> bool:
        return block in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def members(self) -> Container[int]:
        return self._entries

    def _push(self, block: int, freq: int) -> None:
        tick = next(self._counter)
        self._entries[block] = (freq, tick)
        heapq.heappush(self._heap, (freq, tick, block))
        if len(self._heap) > 4 * len(self._entries) + 64:
            self._heap = [(f, t, b) for b, (f, t) in self._entries.items()]
            heapq.heapify(self._heap)

    def touch(self, block: int) -> None:
        self._push(block, self._entries[block][0] + 1)

    def _pop_victim(self, pinned: Container[int] | None) -> int | None:
        heap = self._heap
        skipped: list[tuple[int, int, int]] = []
        victim: int | None = None
        while heap:
            freq, tick, block = heapq.heappop(heap)
            if self._entries.get(block) != (freq, tick):
                continue
            if pinned is not None and block in pinned:
                skipped.append((freq, tick, block))
                continue
            victim = block
            break
        for item in skipped:
            heapq.heappush(heap, item)
        if victim is not None:
            del self._entries[victim]
        return victim

    def admit(self, block: int, pinned: Container[int] | None = None) -> tuple[bool, list[int]]:
        cap = self.capacity
        evicted: list[int] = []
        if cap is not None:
            if cap <= 0:
                return False, evicted
            while len(self._entries) >= cap:
                victim = self._pop_victim(pinned)
                if victim is None:
                    return False, evicted
                evicted.append(victim)
        self._push(block, 1)
        return True, evicted

    def discard(self, block: int) -> None:
        self._entries.pop(block, None)

    def eviction_order(self) -> Iterator[int]:
        return iter(sorted(self._entries, key=self._entries.__getitem__))


class ARCCache:
    __slots__ = ("_all", "_b1", "_b2", "_p", "_t1", "_t2", "capacity")

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self._t1: OrderedDict[int, None] = OrderedDict()
        self._t2: OrderedDict[int, None] = OrderedDict()
        self._b1: OrderedDict[int, None] = OrderedDict()
        self._b2: OrderedDict[int, None] = OrderedDict()
        self._p = 0.0
        self._all: dict[int, None] = {}

    def __contains__(self, block: object) -> bool:
        return block in self._all

    def __len__(self) -> int:
        return len(self._all)

    @property
    def members(self) -> Container[int]:
        return self._all

    def touch(self, block: int) -> None:
        if block in self._t1:
            del self._t1[block]
            self._t2[block] = None
        else:
            self._t2.move_to_end(block)

    @staticmethod
    def _lru(lst: OrderedDict[int, None], pinned: Container[int] | None) -> int | None:
        first = next(iter(lst), None)
        if pinned is None or first is None or first not in pinned:
            return first
        return next((b for b in lst if b not in pinned), None)

    def _replace(self, in_b2: bool, pinned: Container[int] | None) -> int | None:
        """Evict the LRU page of T1 (to ghost B1) or of T2 (to ghost B2), as ARC's REPLACE decides."""
        t1_first = len(self._t1) >= 1 and (len(self._t1) > self._p or (in_b2 and len(self._t1) == self._p))
        order = ((self._t1, self._b1), (self._t2, self._b2))
        if not t1_first:
            order = (order[1], order[0])
        for lst, ghost in order:
            victim = self._lru(lst, pinned)
            if victim is not None:
                del lst[victim]
                del self._all[victim]
                ghost[victim] = None
                return victim
        return None

    def admit(self, block: int, pinned: Container[int] | None = None) -> tuple[bool, list[int]]:
        cap = self.capacity
        evicted: list[int] = []
        if cap is None:
            self._t1[block] = None
            self._all[block] = None
            return True, evicted
        if cap <= 0:
            return False, evicted
        t1, t2, b1, b2 = self._t1, self._t2, self._b1, self._b2
        if block in b1:
            self._p = min(float(cap), self._p + max(len(b2) / len(b1), 1.0))
            if len(t1) + len(t2) >= cap:
                victim = self._replace(False, pinned)
                if victim is None:
                    return False, evicted
                evicted.append(victim)
            del b1[block]
            t2[block] = None
            self._all[block] = None
            return True, evicted
        if block in b2:
            self._p = max(0.0, self._p - max(len(b1) / len(b2), 1.0))
            if len(t1) + len(t2) >= cap:
                victim = self._replace(True, pinned)
                if victim is None:
                    return False, evicted
                evicted.append(victim)
            del b2[block]
            t2[block] = None
            self._all[block] = None
            return True, evicted
        # Case IV: a miss in all four lists.
        if len(t1) + len(b1) >= cap:
            if len(t1) < cap:
                b1.popitem(last=False)
                if len(t1) + len(t2) >= cap:
                    victim = self._replace(False, pinned)
                    if victim is None:
                        return False, evicted
                    evicted.append(victim)
            else:
                victim = self._lru(t1, pinned)
                if victim is None:
                    victim = self._replace(False, pinned)
                    if victim is None:
                        return False, evicted
                else:
                    del t1[victim]
                    del self._all[victim]
                evicted.append(victim)
        else:
            total = len(t1) + len(t2) + len(b1) + len(b2)
            if total >= cap:
                if total >= 2 * cap and b2:
                    b2.popitem(last=False)
                if len(t1) + len(t2) >= cap:
                    victim = self._replace(False, pinned)
                    if victim is None:
                        return False, evicted
                    evicted.append(victim)
        t1[block] = None
        self._all[block] = None
        # Keep the ghosts bounded (|T1|+|B1| <= c, total <= 2c) even when pins forced unusual choices.
        n1, nb1 = len(t1), len(b1)
        while n1 + nb1 > cap and nb1:
            b1.popitem(last=False)
            nb1 -= 1
        extra = n1 + len(t2) + nb1 + len(b2) - 2 * cap
        while extra > 0 and b2:
            b2.popitem(last=False)
            extra -= 1
        return True, evicted

    def discard(self, block: int) -> None:
        self._t1.pop(block, None)
        self._t2.pop(block, None)
        self._all.pop(block, None)

    def eviction_order(self) -> Iterator[int]:
        first, second = (self._t1, self._t2) if len(self._t1) > self._p else (self._t2, self._t1)
        return itertools.chain(iter(first), iter(second))


def make_cache(policy: str, capacity: int | None) -> TierCache:
    if policy == "lru":
        return LRUCache(capacity)
    if policy == "lfu":
        return LFUCache(capacity)
    if policy == "arc":
        return ARCCache(capacity)
    raise ValueError(policy)
