"""The environment a profile was measured in: recorded in every profile file."""

from __future__ import annotations

import platform
import socket
import sys
from datetime import UTC, datetime
from typing import Any

from vramctl import __version__
from vramctl.measure.device import DeviceInfo


def collect(info: DeviceInfo) -> dict[str, Any]:
    """Device name, driver, CUDA, torch, vramctl and Python versions, host and time (UTC, ISO 8601)."""
    try:
        import torch

        torch_version: str | None = str(torch.__version__)
    except ImportError:  # pragma: no cover
        torch_version = None
    return {
        "device_kind": info.kind,
        "device_name": info.name,
        "driver_version": info.driver_version,
        "cuda_version": info.cuda_version,
        "compute_capability": info.compute_capability,
        "torch_version": torch_version,
        "vramctl_version": __version__,
        "python_version": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "hostname": socket.gethostname(),
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }
