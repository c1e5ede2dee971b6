"""vramctl/measure/cuda_graphs.py against a fake torch.cuda: the capture protocol without a GPU.

The real capture runs in tests/measure/test_measure_gpu.py (CUDA only). Here the driver is a ledger of
free bytes: each fake graph takes memory when its capture ends and gives it back when it is destroyed,
so the test sees the order of captures, the per-capture free-memory drops, vLLM's estimate, that every
capture goes into the one throwaway pool after a warm-up at its size, and that everything is released,
also when a capture fails.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import pytest
from measure_helpers import tiny_dense, tiny_mla, tiny_moe

from vramctl.core.units import GiB, MiB
from vramctl.measure.cuda_graphs import capture_graphs, profile_graph_memory, vllm_estimate
from vramctl.measure.model import ReferenceModel

torch = pytest.importorskip("torch")


class FakeDriver:
    def __init__(self) -> None:
        self.free = 40 * GiB
        self.total = 80 * GiB
        self.pools: list[object] = []
        self.captured: list[tuple[int, object]] = []
        self.capturing: int | None = None
        self.decode_batches: list[tuple[int, bool]] = []
        self.live_graphs = 0
        self.fail_at: int | None = None
        self.replays = 0


def _cost(size: int, first: bool) -> int:
    return (64 * MiB if first else 0) + size * MiB // 4


def _install(monkeypatch: pytest.MonkeyPatch, drv: FakeDriver) -> None:
    class Graph:
        def __init__(self) -> None:
            self.bytes = 0
            drv.live_graphs += 1

        def replay(self) -> None:
            drv.replays += 1

        def __del__(self) -> None:
            drv.free += self.bytes
            drv.live_graphs -= 1

    @contextlib.contextmanager
    def graph(g: Graph, pool: object = None, stream: object = None) -> Iterator[None]:
        assert pool is not None and stream is not None
        drv.capturing = 0
        yield
        size = drv.capturing
        drv.capturing = None
        if drv.fail_at == size:
            raise RuntimeError("CUDA error: out of memory")
        g.bytes = _cost(size, not drv.captured)
        drv.free -= g.bytes
        drv.captured.append((size, pool))

    class Stream:
        def __init__(self, device: object = None) -> None:
            pass

        def wait_stream(self, other: object) -> None:
            pass

    def pool_handle() -> object:
        handle = object()
        drv.pools.append(handle)
        return handle

    cuda = torch.cuda
    monkeypatch.setattr(cuda, "Stream", Stream)
    monkeypatch.setattr(cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(cuda, "graph_pool_handle", pool_handle)
    monkeypatch.setattr(cuda, "mem_get_info", lambda device=None: (drv.free, drv.total))
    monkeypatch.setattr(cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(cuda, "graph", graph)


def _model(spec: Any, drv: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> ReferenceModel:
    model = ReferenceModel(spec, device="cpu", dtype="float32")
    real = model.decode_step

    def decode_step(**kwargs: Any) -> Any:
        batch = int(kwargs["token_ids"].shape[0])
        if drv.capturing is not None:
            drv.capturing = batch
        drv.decode_batches.append((batch, drv.capturing is not None))
        return real(**kwargs)

    monkeypatch.setattr(model, "decode_step", decode_step)
    return model


@pytest.mark.parametrize("make", [tiny_dense, tiny_moe, tiny_mla], ids=["dense", "moe", "mla"])
def test_capture_protocol_and_release(monkeypatch: pytest.MonkeyPatch, make: Any) -> None:
    drv = FakeDriver()
    _install(monkeypatch, drv)
    model = _model(make(), drv, monkeypatch)
    start = drv.free
    sizes = (1, 2, 4, 8, 16)
    result = profile_graph_memory(model, sizes=sizes, max_num_seqs=8, block_size=16, kv_dtype=torch.float32)
    # largest first, each captured once into the single throwaway pool
    assert result.sizes == (16, 8, 4, 2, 1)
    assert [s for s, _ in drv.captured] == [16, 8, 4, 2, 1]
    assert len(drv.pools) == 1 and all(p is drv.pools[0] for _, p in drv.captured)
    # every size is warmed up (outside capture) right before it is captured
    for size in sizes:
        i = drv.decode_batches.index((size, True))
        assert drv.decode_batches[i - 1] == (size, False)
    # samples are the free-memory drops; estimate is vLLM's first + (n − 1) × max(second, 1 MiB)
    expected = tuple(_cost(s, i == 0) for i, s in enumerate((16, 8, 4, 2, 1)))
    assert result.samples_bytes == expected
    assert result.actual_bytes == sum(expected)
    assert result.estimate_bytes == vllm_estimate(expected) == expected[0] + 4 * max(expected[1], MiB)
    # everything is released: the graphs (and so the pool) are gone
    gc.collect()
    assert drv.live_graphs == 0 and drv.free == start


def test_validate_replays_every_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    drv = FakeDriver()
    _install(monkeypatch, drv)
    model = _model(tiny_dense(), drv, monkeypatch)
    caches = model.allocate_kv_cache(8, 16)
    result = capture_graphs(model, caches, sizes=(4, 1, 2, 2, 0), num_blocks=8, block_size=16, replay=True)
    assert result.sizes == (4, 2, 1)  # deduplicated, non-positive sizes dropped
    assert drv.replays == 3


def test_failed_capture_releases_the_earlier_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    drv = FakeDriver()
    _install(monkeypatch, drv)
    drv.fail_at = 2
    model = _model(tiny_dense(), drv, monkeypatch)
    start = drv.free
    with pytest.raises(RuntimeError, match="out of memory"):
        profile_graph_memory(model, sizes=(1, 2, 4), max_num_seqs=4, block_size=16, kv_dtype=torch.float32)
    gc.collect()
    assert drv.live_graphs == 0 and drv.free == start


def test_no_sizes_captures_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    drv = FakeDriver()
    _install(monkeypatch, drv)
    model = _model(tiny_dense(), drv, monkeypatch)
    result = capture_graphs(model, [], sizes=(), num_blocks=1, block_size=16)
    assert result.estimate_bytes == result.actual_bytes == 0 and not drv.captured
