"""The device backends: the cpu backend is a real measurement of this process; cuda needs a GPU."""

from __future__ import annotations

import gc
import os

import pytest

from vramctl.core.errors import BadInputError, NoDeviceError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.units import GiB, MiB
from vramctl.measure import device as device_module
from vramctl.measure.device import (
    CpuBackend,
    Snapshot,
    host_memory,
    open_device,
    parse_device,
    read_hwm_bytes,
    read_rss_bytes,
    reset_hwm,
)


def test_snapshot_fields_and_non_torch() -> None:
    snap = Snapshot(
        free_bytes=10 * GiB,
        total_bytes=80 * GiB,
        torch_allocated_bytes=50 * GiB,
        torch_peak_bytes=60 * GiB,
        torch_reserved_bytes=55 * GiB,
        process_bytes=55 * GiB,
        timestamp=0.0,
    )
    assert snap.used_bytes == 70 * GiB
    assert snap.non_torch_bytes == 15 * GiB  # used − reserved (vLLM non_torch_memory)
    assert snap.to_json()["non_torch_bytes"] == 15 * GiB


def test_rss_moves_with_a_200_mib_allocation() -> None:
    torch = pytest.importorskip("torch")
    backend = CpuBackend()
    gc.collect()
    before = backend.snapshot()
    block = torch.ones(200 * MiB, dtype=torch.uint8)  # written: resident
    during = backend.snapshot()
    grown = during.process_bytes - before.process_bytes
    assert 190 * MiB <= grown <= 260 * MiB, grown
    assert backend.consumed_between(before, during) == grown
    del block
    backend.empty_cache()
    after = backend.snapshot()
    assert after.process_bytes < during.process_bytes - 150 * MiB
    # the high-water mark remembers the peak until it is reset (both counted from when the device opened)
    assert after.torch_peak_bytes >= during.torch_allocated_bytes - 4 * MiB


def test_hwm_reset_through_clear_refs() -> None:
    np = pytest.importorskip("numpy")
    if not reset_hwm():
        pytest.skip("/proc/self/clear_refs is not writable here")
    arr = np.ones(150 * MiB, dtype=np.uint8)
    peak = read_hwm_bytes()
    del arr
    gc.collect()
    device_module._malloc_trim()
    assert read_hwm_bytes() >= peak - MiB
    assert reset_hwm()
    assert read_hwm_bytes() <= read_rss_bytes() + 16 * MiB
    assert read_hwm_bytes() < peak - 100 * MiB


def test_host_memory_is_sane() -> None:
    free, total = host_memory()
    assert 0 < free <= total
    assert total >= 256 * MiB


def test_emulated_capacity() -> None:
    torch = pytest.importorskip("torch")
    backend = CpuBackend(capacity_bytes=1 * GiB)
    snap = backend.snapshot()
    assert snap.total_bytes == 1 * GiB
    assert 0 < snap.free_bytes <= 1 * GiB
    block = torch.ones(64 * MiB, dtype=torch.uint8)
    later = backend.snapshot()
    assert snap.free_bytes - later.free_bytes >= 60 * MiB
    del block
    info = backend.info()
    assert info.kind == "cpu" and info.emulated_capacity_bytes == 1 * GiB


def test_bad_capacity() -> None:
    with pytest.raises(BadInputError):
        CpuBackend(capacity_bytes=0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("cpu", ("cpu", 0)), ("cuda", ("cuda", 0)), ("cuda:3", ("cuda", 3)), ("GPU:1", ("cuda", 1))],
)
def test_parse_device(text: str, expected: tuple[str, int]) -> None:
    assert parse_device(text) == expected


@pytest.mark.parametrize("text", ["tpu", "cuda:x", "cuda:-1", ""])
def test_parse_device_rejects(text: str) -> None:
    with pytest.raises(BadInputError, match="--device"):
        parse_device(text)


def test_no_cuda_is_exit_4_pointing_to_cpu_and_plan() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(NoDeviceError) as info:
        open_device("cuda:0")
    assert info.value.exit_code == ExitCode.NO_DEVICE
    assert "--device cpu" in str(info.value) and "vramctl plan" in str(info.value)


def test_cgroup_limit_caps_total(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> None:
    from pathlib import Path

    limit = Path(tmp_path) / "memory.max"
    usage = Path(tmp_path) / "memory.current"
    limit.write_text(str(512 * MiB))
    usage.write_text(str(100 * MiB))
    monkeypatch.setattr(device_module, "_CGROUP_V2_MAX", limit)
    monkeypatch.setattr(device_module, "_CGROUP_V2_CURRENT", usage)
    free, total = host_memory()
    assert total == 512 * MiB
    assert free <= 412 * MiB
    limit.write_text("max")
    free, total = host_memory()
    assert total > 512 * MiB
