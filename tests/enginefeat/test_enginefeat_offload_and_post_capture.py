"""Native KV offload's host memory by version (vramctl.core.engines.vllm_offload) and SGLang's post-capture
headroom term (vramctl.core.engines.sglang.post_capture)."""

from __future__ import annotations

import json
import subprocess
import sys

from vramctl.core.engines import vllm_offload as off
from vramctl.core.engines.sglang import post_capture as pc
from vramctl.core.host_tier import plan_host_tier
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GB, GiB
from vramctl.registry import load_gpu, load_model

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _host(version: str, **changes: object) -> object:
    settings = ServeSettings(
        engine_version=version, kv_offloading_size_gib=64, host_memory_bytes=512 * GiB
    ).with_changes(**changes)
    host = plan_host_tier(
        load_model(MODEL), load_gpu("h100-sxm"), settings, device_kv_tokens=400_000, kv_bytes_per_token=131072,
        engine="vllm",
    )
    assert host is not None
    return host


def test_region_is_at_most_the_requested_bytes_not_1_92x() -> None:
    host = _host("0.33.0")
    region = host.pinned_bytes_total  # type: ignore[attr-defined]
    chunk = 131072 * 16  # bytes per block × 1 rank, page aligned
    assert region == (64 * GiB // chunk) * chunk <= 64 * GiB
    notes = " ".join(host.notes)  # type: ignore[attr-defined]
    assert "/dev/shm/vllm_offload_<engine_id>.mmap" in notes
    assert f"({region / GB:.2f} GB)" in notes  # the engine logs decimal GB
    assert "unlinked" in notes


def test_before_0_28_private_pinned_tensors_may_round_up() -> None:
    notes = " ".join(_host("0.26.0").notes)  # type: ignore[attr-defined]
    assert "no /dev/shm region before 0.28" in notes and "64.00 GiB per rank" in notes
    assert off.next_power_of_two(80 * GiB) == 128 * GiB and off.next_power_of_two(64 * GiB) == 64 * GiB


def test_data_parallel_engines_each_have_a_region() -> None:
    notes = " ".join(_host("0.33.0", data_parallel_size=2).notes)  # type: ignore[attr-defined]
    assert "once per data-parallel engine (2 ×" in notes


def test_lmcache_backend_is_honoured() -> None:
    host = _host("0.33.0", kv_offloading_backend="lmcache")
    assert host.mechanism == "vllm-lmcache" and host.pinned_bytes_total == 0  # type: ignore[attr-defined]


def test_cli_offload_backend_flag_in_a_pasted_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", "--json", "--host-memory", "256GiB", "--", "vllm", "serve", MODEL,
         "--max-model-len", "8192", "--kv-offloading-size", "16", "--kv-offloading-backend", "lmcache"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["host_tier"]["mechanism"] == "vllm-lmcache"


# --- SGLang post-capture headroom ------------------------------------------------------------------------------


def test_headroom_is_pre_times_one_minus_mfs_without_a_raise() -> None:
    h = pc.post_capture_headroom(
        "0.5.23", pre_gib=78.0, mfs=0.9, reserve_mib=10240, eager_decode_gap=False, mamba=False, multimodal=False
    )
    assert abs(h.headroom_gib - 7.8) < 1e-9 and h.raised_by == () and h.mm_reservation_gib == 0


def test_mamba_or_an_eager_gap_raise_it_to_the_reserve() -> None:
    for kw in ({"mamba": True, "eager_decode_gap": False}, {"mamba": False, "eager_decode_gap": True}):
        h = pc.post_capture_headroom("0.5.17", pre_gib=78.0, mfs=0.99, reserve_mib=10240, multimodal=False, **kw)
        assert h.headroom_gib == 10.0
    exempt = pc.post_capture_headroom(
        "0.5.22", pre_gib=78.0, mfs=0.99, reserve_mib=10240, eager_decode_gap=False, mamba=True, multimodal=False,
        capped_full_prefill_role=True,
    )
    assert abs(exempt.headroom_gib - 0.78) < 1e-9


def test_multimodal_reservation_and_sampling_headroom_by_version() -> None:
    assert pc.mm_reservation_gib("0.5.17", multimodal=True) == 0
    assert pc.mm_reservation_gib("0.5.18", multimodal=True) == 100 / 1024
    assert pc.mm_reservation_gib("0.5.23", multimodal=True, mm_feature_transport="cuda_ipc") == 1124 / 1024
    kw = {"pre_gib": 78.0, "mfs": 0.99, "reserve_mib": 0.0, "eager_decode_gap": False, "mamba": False,
          "multimodal": False, "sampling_headroom_bytes": 2 * GiB}
    assert pc.post_capture_headroom("0.5.19", **kw).headroom_gib < 1  # type: ignore[arg-type]
    assert pc.post_capture_headroom("0.5.20", **kw).headroom_gib == 2.0  # type: ignore[arg-type]


def test_hybrid_post_capture_plan_keeps_the_reserve_out_of_the_pool() -> None:
    """Qwen3-Next (mamba state) with post-capture sizing: the slack is the reserve, never negative."""
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", "--json", "--engine", "sglang", "--engine-version", "0.5.23",
         "--gpu", "h200", "--", "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1", "python", "-m", "sglang.launch_server",
         "--model-path", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--tp", "2"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["sglang"]["post_capture_kv_sizing"] is True
    assert data["terms"]["slack"]["bytes"] >= 0
