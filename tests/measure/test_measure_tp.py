"""Tensor parallelism on CPU: two gloo ranks, communicators before the init snapshot, the minimum taken."""

from __future__ import annotations

import json

import pytest
from measure_helpers import FAST

from vramctl.cli.main import main

pytest.importorskip("torch")


def test_two_gloo_ranks(capsys: pytest.CaptureFixture[str], tiny_model_dir: str) -> None:
    code = main(["profile", tiny_model_dir, *FAST, "-tp", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    ranks = out["measurements"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    # each rank holds its shard: half the heads / intermediate / vocabulary (float32 tiny model: 11.5 MB whole)
    # norms are replicated: 9 vectors of 256 float32 stay whole on each rank
    for r in ranks:
        assert r["weight_tensor_bytes"] == (2 * 5_771_776 - 9 * 256 * 4) // 2 + 9 * 256 * 4
    # KV heads per rank: max(1, 2 // 2) = 1 → half the bytes per block of tp=1 (4-byte elements: --dtype float32)
    assert out["bytes_per_block"] == 4 * 64 * 1 * 64 * 2 * 4  # blocks of 64 tokens (vLLM 0.34's default)
    assert out["settings"]["tensor_parallel_size"] == 2
    # vLLM's CPU default scales with the world size: 2048 · ws tokens, unless given (FAST gives 256)
    assert out["settings"]["max_num_batched_tokens"] == 256
    blocks = [(r["requested_bytes"] - r["non_kv_bytes"]) // out["bytes_per_block"] for r in ranks]
    assert out["num_blocks"] == min(blocks)
    assert out["measurements"]["binding_rank"] == blocks.index(min(blocks))
    assert any("2 ranks" in note for note in out["notes"])
    assert sum(t["bytes"] for t in out["terms"].values()) == out["capacity_bytes"]


def test_rank_failure_is_reported_once(capsys: pytest.CaptureFixture[str], tiny_model_dir: str) -> None:
    # an emulated device too small for the utilisation check fails in every rank; the parent reports one line
    code = main(["profile", tiny_model_dir, *FAST, "-tp", "2", "--device-memory", "1TiB"])
    err = capsys.readouterr().err
    assert code == 1
    assert len([line for line in err.splitlines() if line.startswith("vramctl: error:")]) == 1
    assert "Free memory on device cpu" in err


def test_validate_a_tp_shard_alone(capsys: pytest.CaptureFixture[str], tiny_model_dir: str) -> None:
    code = main(["validate", tiny_model_dir, *FAST, "-tp", "2", "--kv-cache-memory-bytes", "32MiB", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["passed"]
    # one KV head per rank, fp32 (--dtype float32), blocks of 64 tokens (vLLM 0.34's default)
    assert out["bytes_per_block"] == 4 * 64 * 1 * 64 * 2 * 4
    assert out["num_blocks"] == 32 * 1024 * 1024 // out["bytes_per_block"]
    assert any("rank 0's shard" in note for note in out["notes"])


def test_a_rank_killed_by_the_oom_killer_is_exit_5() -> None:
    import signal

    from vramctl.core.exit_codes import ExitCode
    from vramctl.measure.distributed import dead_rank_error

    err = dead_rank_error(1, -int(signal.SIGKILL), "cpu")
    assert err.exit_code == ExitCode.OUT_OF_MEMORY
    assert "rank 1" in str(err) and "OOM killer" in str(err)
    other = dead_rank_error(0, -int(signal.SIGSEGV), "cpu")
    assert other.exit_code == ExitCode.INTERNAL_ERROR and "SIGSEGV" in str(other)
    assert dead_rank_error(0, 3, "cuda").exit_code == ExitCode.INTERNAL_ERROR
    assert dead_rank_error(0, -int(signal.SIGKILL), "cuda").exit_code == ExitCode.INTERNAL_ERROR


def test_communicators_come_before_the_device_is_opened_and_snapshotted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's order (gpu_worker.py:504 before :541): process group + a first collective, then the snapshot."""
    import torch.distributed as dist
    from measure_helpers import tiny_dense

    from vramctl.core.settings import ServeSettings
    from vramctl.measure import distributed
    from vramctl.measure.profiler import ProfileRequest

    events: list[str] = []

    class Backend:
        def info(self) -> object:
            events.append("info")
            return object()

        def snapshot(self) -> object:
            events.append("snapshot")
            return type("S", (), {"total_bytes": 1 << 30})()

    class Out:
        def __init__(self) -> None:
            self.items: list[tuple[object, ...]] = []

        def put(self, item: tuple[object, ...]) -> None:
            self.items.append(item)

    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: events.append(f"init:{backend}"))
    monkeypatch.setattr(dist, "all_reduce", lambda tensor, *a, **kw: events.append("all_reduce"))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)  # keep this test process's threads
    monkeypatch.setattr(distributed, "open_device", lambda *a, **kw: events.append("open") or Backend())
    monkeypatch.setattr(distributed, "resolve", lambda *a, **kw: events.append("resolve") or "resolved")

    def profile_rank(*args: object, **kwargs: object) -> str:
        events.append("profile_rank")
        return "measurement"

    monkeypatch.setattr(distributed, "profile_rank", profile_rank)
    out = Out()
    request = ProfileRequest(tiny_dense(), ServeSettings(tensor_parallel_size=2), device="cpu")
    distributed._rank_main(1, 2, 12345, request, out)
    assert events[:3] == ["init:gloo", "all_reduce", "open"]
    assert events.index("all_reduce") < events.index("snapshot") < events.index("profile_rank")
    assert out.items[-1][:3] == ("result", 1, "measurement")
