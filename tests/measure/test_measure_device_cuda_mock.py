"""The cuda backend's field mapping and NVML query against fakes (the real ones run under `-m gpu`)."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import pytest

from vramctl.core.errors import NoDeviceError
from vramctl.core.units import GiB, MiB
from vramctl.measure import device as device_module
from vramctl.measure.device import CudaBackend

torch = pytest.importorskip("torch")


class FakeCuda:
    def __init__(self) -> None:
        self.free = 70 * GiB
        self.total = 80 * GiB
        self.allocated = 3 * GiB
        self.peak = 5 * GiB
        self.reserved = 4 * GiB
        self.peak_resets = 0
        self.empty = 0


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    fake = FakeCuda()
    cuda = torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "device_count", lambda: 2)
    monkeypatch.setattr(cuda, "set_device", lambda index: None)
    monkeypatch.setattr(cuda, "init", lambda: None)
    monkeypatch.setattr(cuda, "synchronize", lambda index=None: None)
    monkeypatch.setattr(cuda, "mem_get_info", lambda index=None: (fake.free, fake.total))
    monkeypatch.setattr(
        cuda,
        "memory_stats",
        lambda index=None: {
            "allocated_bytes.all.current": fake.allocated,
            "allocated_bytes.all.peak": fake.peak,
        },
    )
    monkeypatch.setattr(cuda, "memory_reserved", lambda index=None: fake.reserved)
    monkeypatch.setattr(cuda, "max_memory_allocated", lambda index=None: fake.peak)

    def reset(index: Any = None) -> None:
        fake.peak_resets += 1
        fake.peak = fake.allocated

    def empty() -> None:
        fake.empty += 1

    monkeypatch.setattr(cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(cuda, "empty_cache", empty)
    monkeypatch.setattr(device_module, "_freeze_import_garbage", lambda: None)
    return fake


def test_snapshot_is_vllms_memory_snapshot(fake_cuda: FakeCuda) -> None:
    backend = CudaBackend(1)
    assert backend.torch_device == "cuda:1"
    snap = backend.snapshot()
    assert (snap.free_bytes, snap.total_bytes) == (70 * GiB, 80 * GiB)
    assert snap.torch_allocated_bytes == 3 * GiB and snap.torch_peak_bytes == 5 * GiB
    assert snap.torch_reserved_bytes == 4 * GiB
    # non-torch = (total − free) − reserved: context, NCCL, cuBLAS and other processes
    assert snap.non_torch_bytes == 10 * GiB - 4 * GiB
    # vLLM ≥ 0.28: consumed = drop in free memory
    fake_cuda.free -= 2 * GiB
    assert backend.consumed_between(snap, backend.snapshot()) == 2 * GiB
    # DeviceMemoryProfiler reading: empty_cache, reset peak, then max allocated
    assert backend.allocated_reading() == 3 * GiB and fake_cuda.peak_resets == 1 and fake_cuda.empty >= 1


def test_emulated_capacity_on_a_gpu(fake_cuda: FakeCuda) -> None:
    backend = CudaBackend(0, capacity_bytes=16 * GiB)
    snap = backend.snapshot()
    assert snap.total_bytes == 16 * GiB and snap.free_bytes == 16 * GiB  # what was used at open is not on it
    fake_cuda.free -= 6 * GiB
    assert backend.snapshot().free_bytes == 10 * GiB
    big = CudaBackend(0, capacity_bytes=200 * GiB)  # never more free than the card really has
    assert big.snapshot().total_bytes == 200 * GiB and big.snapshot().free_bytes == fake_cuda.free


def test_index_out_of_range_names_the_devices(fake_cuda: FakeCuda) -> None:
    with pytest.raises(NoDeviceError, match=r"has 2 CUDA device\(s\) \(cuda:0..cuda:1\)"):
        CudaBackend(2)


def _fake_pynvml(processes: list[Any], fail_processes: bool = False) -> types.ModuleType:
    mod = types.ModuleType("pynvml")
    calls: dict[str, Any] = {"handle": None, "shutdown": 0}

    def handle(index: int) -> str:
        calls["handle"] = index
        return f"h{index}"

    def running(h: str) -> list[Any]:
        if fail_processes:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return processes

    mod.nvmlInit = lambda: None  # type: ignore[attr-defined]
    mod.nvmlShutdown = lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = handle  # type: ignore[attr-defined]
    mod.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"  # type: ignore[attr-defined]
    mod.nvmlSystemGetDriverVersion = lambda: "560.35.03"  # type: ignore[attr-defined]
    mod.nvmlDeviceGetComputeRunningProcesses = running  # type: ignore[attr-defined]
    mod.calls = calls  # type: ignore[attr-defined]
    return mod


def test_nvml_name_driver_and_other_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = types.SimpleNamespace
    fake = _fake_pynvml(
        [
            proc(pid=os.getpid(), usedGpuMemory=9 * GiB),  # this process: not "other"
            proc(pid=1, usedGpuMemory=3 * GiB),
            proc(pid=2, usedGpuMemory=None),  # not reported (no permission / MIG)
            proc(pid=3, usedGpuMemory=512 * MiB),
        ]
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    out = device_module._nvml_query(1)
    assert out == {
        "name": "NVIDIA H100 80GB HBM3",
        "driver": "560.35.03",
        "other_processes_bytes": str(3 * GiB + 512 * MiB),
    }
    assert fake.calls["handle"] == 5 and fake.calls["shutdown"] == 1  # the physical index; NVML shut down


def test_nvml_without_process_list_still_names_the_card(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([], fail_processes=True))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = device_module._nvml_query(0)
    assert out is not None and out["other_processes_bytes"] == "" and out["driver"] == "560.35.03"
