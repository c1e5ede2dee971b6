"""NVML behind the watch's reader interface (marked `gpu`; skipped without an NVIDIA device and nvidia-ml-py)."""

from __future__ import annotations

import os

import pytest

from tests.watch.fakes import FakeEngine
from vramctl.core.units import MiB

pynvml = pytest.importorskip("pynvml")


def _has_device() -> bool:
    try:
        pynvml.nvmlInit()
        count = int(pynvml.nvmlDeviceGetCount())
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_device(), reason="needs an NVIDIA device (NVML)")]


def test_nvml_reader_sees_devices_and_this_process() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA in torch to allocate on the device")
    from vramctl.measure.nvml import NvmlReader

    reader = NvmlReader()
    try:
        block = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize()
        devices = reader.read(frozenset({os.getpid()}))
        assert devices and all(0 < d.used_bytes <= d.capacity_bytes for d in devices)
        first = devices[0]
        assert first.uuid.startswith(("GPU-", "MIG-"))
        if "not reported" not in first.name:  # MIG / containers may hide per-process memory
            assert first.server_bytes >= 512 * MiB
            assert os.getpid() in [pid for pid, _ in first.processes]
        del block
    finally:
        reader.close()


def test_watch_once_on_the_gpu() -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    fake = FakeEngine("vllm")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "vramctl", "watch", fake.url, "--once", "--json", "--device", "cuda"],
            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=120,
        )
    finally:
        fake.stop()
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["devices"][0]["kind"] == "cuda"
    assert sum(data["terms"].values()) == data["devices"][0]["capacity_bytes"]
