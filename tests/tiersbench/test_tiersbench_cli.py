"""`vramctl tiers bench` as a user runs it: output, JSON, the bandwidths file, exit codes, bad input."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.tiers import disk_bench
from vramctl.tiers.bandwidths import SCHEMA, load_bandwidths

SMALL = ["--block-bytes", "64KiB", "--size", "1MiB", "--repeat", "1"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["tiers", "bench", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_is_a_bandwidths_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *SMALL, "--dir", str(tmp_path), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["schema"] == SCHEMA and data["ok"] is True and data["bad_blocks"] == 0
    assert "disk-buffered" in data["tiers"]
    buffered = data["tiers"]["disk-buffered"]
    assert (
        buffered["verified"] is True
        and buffered["read_bytes_per_s"] > 0
        and buffered["write_bytes_per_s"] > 0
    )
    assert data["geometry"]["block_bytes"] == 65536 and data["disk"]["blocks"] == 16
    # no CUDA here: the host-side analogue ran for real, labelled host-memcpy, and is not a tier
    if data["device"] is not None and data["device"]["device"] == "cpu":
        assert {row["tier"] for row in data["device"]["rows"]} == {"host-memcpy"}
        assert {row["method"] for row in data["device"]["rows"]} == {"per-block", "gather", "contiguous"}
        assert all(row["bad_blocks"] == 0 and row["verified_blocks"] > 0 for row in data["device"]["rows"])
        assert "host-memcpy" not in data["tiers"]
    assert list(tmp_path.iterdir()) == []


def test_save_writes_what_tiers_plan_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "bw.json"
    workdir = tmp_path / "work"
    workdir.mkdir()
    code, out, err = run(capsys, *SMALL, "--dir", str(workdir), "--save", str(target))
    assert code == 0, err
    assert f"saved: {target}" in out
    loaded = load_bandwidths(target)
    names = {tier.name for tier in loaded.tiers}
    assert "disk-buffered" in names
    assert all(tier.verified for tier in loaded.tiers)
    assert loaded.environment["disk_dir"] == str(workdir)
    if "disk-direct" in names:
        direct = loaded.get("disk-direct")
        assert direct is not None and direct.latency_s is not None and "O_DIRECT" in direct.method


def test_human_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *SMALL, "--dir", str(tmp_path))
    assert code == 0
    assert "one KV block = 64.00 KiB" in out
    assert "disk-buffered  read+verify" in out and "vs dd" in out
    assert "ok: all" in out and "block reads verified" in out


def test_model_geometry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "llama-3-8b",
        "--size",
        "4MiB",
        "--repeat",
        "1",
        "--dir",
        str(tmp_path),
        "--skip-device",
        "--json",
    )
    assert code == 0, err
    geometry = json.loads(out)["geometry"]
    # Llama-3-8B: 8 KV heads × 128 × 2 (K, V) × 2 B × 16 tokens = 64 KiB per layer, 32 layers
    assert (
        geometry["page_bytes"] == 65536 and geometry["layers"] == 32 and geometry["block_bytes"] == 2 * 2**20
    )
    assert json.loads(out)["disk"]["blocks"] == 2


def test_corrupted_block_fails_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = disk_bench.write_blocks

    def write_then_corrupt(path: Any, layout: disk_bench.BlockLayout, **kwargs: Any) -> float:
        seconds = real_write(path, layout, **kwargs)
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, b"\xff\x00\xff", layout.slot_bytes * 2 + 5000)  # block 2's payload
            os.fsync(fd)
        finally:
            os.close(fd)
        return seconds

    monkeypatch.setattr(disk_bench, "write_blocks", write_then_corrupt)
    save = tmp_path / "bw.json"
    work = tmp_path / "w"
    work.mkdir()
    code, out, _ = run(capsys, *SMALL, "--dir", str(work), "--skip-device", "--save", str(save))
    assert code == 1
    assert "block 2 failed verification (checksum): not served" in out
    assert "FAILED" in out and "not saved" in out
    assert not save.exists()


def test_disk_full_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk_bench.os, "pwrite", full)
    code, _, err = run(capsys, *SMALL, "--dir", str(tmp_path), "--skip-device")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("vramctl: error: --dir ")
    assert "disk full (ENOSPC)" in err and str(tmp_path) in err
    assert list(tmp_path.iterdir()) == []


def test_keep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *SMALL, "--dir", str(tmp_path), "--skip-device", "--keep")
    assert code == 0
    kept = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("kept: ")]
    assert kept and all(Path(p).exists() for p in kept)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--dir", "/nonexistent/dir"], "--dir /nonexistent/dir: no such directory"),
        (["--dir", "/proc"], "--dir /proc: not writable"),
        (["--blocks", "4", "--size", "1MiB"], "give one or the other"),
        (["--blocks", "0"], "--blocks 0"),
        (["--device", "tpu"], "--device 'tpu'"),
        (["--block-bytes", "100"], "--block-bytes"),
        (["--block-bytes", "lots"], "--block-bytes"),
        (["--skip-disk", "--skip-device"], "nothing left to measure"),
        (["--save", "/nonexistent/dir/bw.json"], "--save /nonexistent/dir/bw.json"),
        (["--repeat", "0"], "--repeat 0"),
        (["--block-bytes", "1GiB", "--blocks", "100000", "--skip-disk"], "of host memory"),
        (["--checksum", "md5"], "--checksum"),
        (["--io-size", "1KiB"], "--io-size"),
        (["--size", "1KiB"], "smaller than one KV block"),
        (["no-such-model-xyz"], "unknown model"),
        (["llama-3-8b", "--block-size", "0"], "--block-size 0"),
        (["llama-3-8b", "--kv-cache-dtype", "fp7"], "--kv-cache-dtype"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = (
        []
        if any(a.startswith("--block-bytes") for a in args) or (args and not args[0].startswith("-"))
        else ["--block-bytes", "64KiB"]
    )
    extra = ["--dir", str(tmp_path)] if "--dir" not in args else []
    code, _, err = run(capsys, *args, *base, *extra)
    assert code == 2, err
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_device_cuda_without_cuda_is_exit_4(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from vramctl.measure.transfer import cuda_available

    if cuda_available():
        pytest.skip("a CUDA device is present")
    code, _, err = run(capsys, *SMALL, "--device", "cuda", "--dir", str(tmp_path))
    assert code == 4 and "--device cuda" in err


def test_save_without_a_tier_is_refused_on_cpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from vramctl.measure.transfer import cuda_available

    if cuda_available():
        pytest.skip("a CUDA device is present")
    code, _, err = run(capsys, *SMALL, "--skip-disk", "--save", str(tmp_path / "bw.json"))
    assert code == 2 and "host-memcpy is not a tier" in err
    assert not (tmp_path / "bw.json").exists()


def test_help_lists_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for flag in (
        "--device",
        "--dir",
        "--blocks",
        "--size",
        "--block-bytes",
        "--block-size",
        "--repeat",
        "--skip-disk",
        "--skip-device",
        "--save",
        "--json",
    ):
        assert flag in out


def test_without_torch_the_disk_tier_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vramctl.measure import transfer

    monkeypatch.setattr(transfer, "torch_available", lambda: False)
    code, out, err = run(capsys, *SMALL, "--dir", str(tmp_path))
    assert code == 0, err
    assert "torch is not installed" in out and "disk-buffered" in out
    code, _, err = run(capsys, *SMALL, "--dir", str(tmp_path), "--device", "cpu")
    assert code == 4 and "torch is not installed" in err


def test_json_keys_are_stable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The keys docs/tiers-bench.md documents; renaming one is a breaking change."""
    code, out, _ = run(capsys, *SMALL, "--dir", str(tmp_path), "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {
        "schema", "tiers", "environment", "ok", "verified_blocks", "bad_blocks",
        "geometry", "link", "device", "disk", "notes",
    }  # fmt: skip
    assert set(data["disk"]) == {
        "directory", "filesystem", "block_bytes", "slot_bytes", "blocks", "file_bytes", "io_bytes",
        "checksum", "repeat", "verified_blocks", "bad_blocks", "methods", "kept_files", "notes",
    }  # fmt: skip
    assert set(data["disk"]["methods"][0]) == {
        "method", "tier", "measured", "note", "write", "read", "baseline", "baseline_command",
        "baseline_note", "read_vs_baseline", "latency_s", "verified_blocks", "bad_blocks",
        "page_cache_resident_after_drop",
    }  # fmt: skip
    if data["device"] is not None:
        assert set(data["device"]) == {
            "device", "device_name", "torch_version", "layers", "page_bytes", "block_bytes", "blocks",
            "pool_blocks", "repeat", "verified_blocks", "bad_blocks", "rows", "overlap", "latency_s", "notes",
        }  # fmt: skip
        assert set(data["device"]["rows"][0]) == {
            "tier", "direction", "method", "bytes", "seconds", "median_s", "bytes_per_s", "copies",
            "verified_blocks", "bad_blocks", "vs_contiguous", "vs_link",
        }  # fmt: skip
