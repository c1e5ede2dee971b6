"""`--load-format ipc_cache`: the weight-cache daemon's weights in vLLM's budget, by version
(vramctl.core.engines.vllm_external_weights; vllm/v1/worker/utils.py request_memory at 0.30.0 and 0.32.0)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from vramctl.core.engines import vllm_external_weights as xw
from vramctl.core.engines.vllm import estimates as est
from vramctl.core.errors import BadInputError
from vramctl.core.ledger import OTHER_PROCESSES, WEIGHTS
from vramctl.core.plan import FITS, GPU_UTIL_EXCEEDS_FREE, WEIGHTS_DO_NOT_FIT, plan
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GiB
from vramctl.registry import load_gpu, load_model

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CTX = est.pre_snapshot_overhead(tp=1, v0=False).bytes


def _plan(version: str, **changes: object) -> object:
    settings = ServeSettings(engine_version=version, max_model_len=8192).with_changes(**changes)
    return plan(load_model(MODEL), load_gpu("h100-sxm"), settings)


def _ipc(version: str, **changes: object) -> object:
    return _plan(version, load_format="ipc_cache", **changes)


def test_0_30_default_utilisation_fails_the_free_memory_check() -> None:
    disk, ipc = _plan("0.30.0"), _ipc("0.30.0")
    weights = disk.ledger.bytes_of(WEIGHTS)  # type: ignore[attr-defined]
    total = ipc.capacity_bytes  # type: ignore[attr-defined]
    requested = math.ceil(total * 0.92)
    free_at_snapshot = total - weights - CTX - CTX  # the daemon's weights + context, the engine's context
    assert free_at_snapshot < requested
    assert ipc.verdict == GPU_UTIL_EXCEEDS_FREE  # type: ignore[attr-defined]
    assert "is less than desired GPU memory utilization (0.92," in ipc.verdict_message  # type: ignore[attr-defined]
    assert ipc.ledger.bytes_of(OTHER_PROCESSES) == weights + CTX  # type: ignore[attr-defined]
    assert ipc.ledger.bytes_of(WEIGHTS) == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", ["0.30.0", "0.31.0"])
def test_0_30_kv_is_not_charged_the_weights(version: str) -> None:
    """Where it starts (u low enough), the KV pool is the disk load's plus the weights: they are not charged."""
    disk, ipc = _plan(version, gpu_memory_utilization=0.75), _ipc(version, gpu_memory_utilization=0.75)
    assert ipc.verdict == FITS  # type: ignore[attr-defined]
    weights = disk.ledger.bytes_of(WEIGHTS)  # type: ignore[attr-defined]
    assert ipc.kv_cache_bytes - disk.kv_cache_bytes == weights  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_0_32_subtracts_the_external_weights(version: str) -> None:
    disk, ipc = _plan(version), _ipc(version)
    assert ipc.verdict == FITS  # type: ignore[attr-defined]
    assert ipc.kv_cache_bytes == disk.kv_cache_bytes  # type: ignore[attr-defined]
    assert ipc.ledger.bytes_of(OTHER_PROCESSES) == CTX  # type: ignore[attr-defined]
    ext = ipc.engine_features.external_weights  # type: ignore[attr-defined]
    assert ext.rule == "subtracted" and ext.launcher == "vllm preload"


def test_0_32_weights_above_the_budget_use_vllms_words() -> None:
    ipc = _ipc("0.32.0", gpu_memory_utilization=0.15)
    assert ipc.verdict == WEIGHTS_DO_NOT_FIT  # type: ignore[attr-defined]
    assert ipc.verdict_message.startswith(  # type: ignore[attr-defined]
        "Externally held weights on device cuda:0 (14.99/79.18 GiB) exceed the desired GPU memory utilization "
        "(0.15, 11.88 GiB)."
    )


def test_0_32_free_memory_below_the_engine_budget() -> None:
    ipc = _ipc("0.33.0", free_memory_bytes=60 * GiB)
    assert ipc.verdict == GPU_UTIL_EXCEEDS_FREE  # type: ignore[attr-defined]
    assert "less than the engine's budget after excluding external process's weights (0.92, 57.86 GiB)" in (
        ipc.verdict_message  # type: ignore[attr-defined]
    )


def test_copy_mode_is_outside_the_budget_in_every_version() -> None:
    ipc = _ipc("0.33.0", weight_cache_mode="copy")
    assert ipc.engine_features.external_weights.rule == "outside"  # type: ignore[attr-defined]
    assert ipc.verdict == GPU_UTIL_EXCEEDS_FREE  # type: ignore[attr-defined]


def test_largest_utilisation_starts() -> None:
    ipc = _ipc("0.30.0")
    ext = ipc.engine_features.external_weights  # type: ignore[attr-defined]
    u = xw.largest_utilization(ext, total=ipc.capacity_bytes, engine_outside_bytes=CTX)  # type: ignore[attr-defined]
    assert _ipc("0.30.0", gpu_memory_utilization=u).verdict == FITS  # type: ignore[attr-defined]
    assert _ipc("0.30.0", gpu_memory_utilization=round(u + 0.01, 2)).verdict == GPU_UTIL_EXCEEDS_FREE  # type: ignore[attr-defined]


def test_refusals() -> None:
    with pytest.raises(BadInputError, match=r"added in 0\.30\.0"):
        _ipc("0.29.0")
    with pytest.raises(BadInputError, match="rejects pipeline parallelism"):
        _ipc("0.31.0", pipeline_parallel_size=2)
    with pytest.raises(BadInputError, match="expected 'zero_copy' or 'copy'"):
        _ipc("0.33.0", weight_cache_mode="mmap")
    assert _ipc("0.32.0", pipeline_parallel_size=2, gpu_memory_utilization=0.9).engine_features is not None  # type: ignore[attr-defined]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vramctl", *args], capture_output=True, text=True, timeout=120)


def test_cli_serve_command_and_flags_agree() -> None:
    pasted = _cli("plan", "--json", "--engine-version", "0.30.0", "--", "vllm", "serve", MODEL, "--load-format",
                  "ipc_cache", "--model-loader-extra-config", '{"mode": "copy"}', "--max-model-len", "8192")
    flags = _cli("plan", MODEL, "--json", "--engine-version", "0.30.0", "--load-format", "ipc_cache",
                 "--weight-cache-mode", "copy", "--max-model-len", "8192")
    assert pasted.returncode == flags.returncode == 1, pasted.stderr + flags.stderr
    a, b = json.loads(pasted.stdout), json.loads(flags.stdout)
    assert a["engine_features"] == b["engine_features"]
    assert a["engine_features"]["external_weights"]["mode"] == "copy"
    assert a["verdict"] == "gpu-util-exceeds-free-memory"
    bad = _cli("plan", MODEL, "--engine-version", "0.29.0", "--load-format", "ipc_cache")
    assert bad.returncode == 2 and "added in 0.30.0" in bad.stderr and "Traceback" not in bad.stderr
