"""Host-tier transfers: the three methods run and verify on CPU (host-memcpy); on CUDA (marked gpu) for real."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from vramctl.measure import transfer  # noqa: E402
from vramctl.measure.transfer import (  # noqa: E402
    CONTIGUOUS,
    GATHER,
    HOST_MEMCPY,
    HOST_PAGEABLE,
    HOST_PINNED,
    LOAD,
    OFFLOAD,
    PER_BLOCK,
    BenchGeometry,
    OverlapResult,
    run_tiers_bench,
    run_transfer_bench,
)

HAS_CUDA = bool(torch.cuda.is_available())


def test_cpu_host_memcpy_runs_all_methods_verified() -> None:
    result = run_transfer_bench(device="cpu", page_bytes=4096, layers=4, num_blocks=8, repeat=2)
    assert result.ok and result.device == "cpu"
    assert {(r.tier, r.direction, r.method) for r in result.rows} == {
        (HOST_MEMCPY, d, m) for d in (OFFLOAD, LOAD) for m in (PER_BLOCK, GATHER, CONTIGUOUS)
    }
    for row in result.rows:
        assert row.bytes_moved == 4 * 8 * 4096
        assert len(row.seconds) == 2 and row.bytes_per_s > 0
        assert row.verified_blocks == 3 * 8  # warm-up pass + 2 timed, every block checked
        assert row.bad_blocks == 0
    per_block = result.row(HOST_MEMCPY, OFFLOAD, PER_BLOCK)
    assert per_block is not None and per_block.copies == 4 * 8
    contiguous = result.row(HOST_MEMCPY, LOAD, CONTIGUOUS)
    assert contiguous is not None and result.baseline_ratio(contiguous) == 1.0
    notes = " ".join(result.notes)
    assert "not a PCIe figure" in notes and "pinned" in notes and "overlap" in notes


@pytest.mark.parametrize("page_bytes", [4096, 4100, 4098, 4099])
def test_any_page_size_moves_exactly(page_bytes: int) -> None:
    """int64, int32, int16 and uint8 element views all move and verify byte-exactly."""
    result = run_transfer_bench(device="cpu", page_bytes=page_bytes, layers=2, num_blocks=3, repeat=1)
    assert result.ok and all(r.bytes_moved == 2 * 3 * page_bytes for r in result.rows)


def test_a_corrupted_gather_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    real = torch.index_select

    def corrupting(src: Any, dim: int, index: Any, *, out: Any = None) -> Any:
        if out is None:
            return real(src, dim, index)
        result = real(src, dim, index, out=out)
        out[0, 3] += 1  # one element of the first page of each gathered chunk
        return result

    monkeypatch.setattr(torch, "index_select", corrupting)
    result = run_transfer_bench(device="cpu", page_bytes=4096, layers=2, num_blocks=4, repeat=2)
    gather = result.row(HOST_MEMCPY, OFFLOAD, GATHER)
    # rows are layer-major (row = layer × 4 + block); chunk starts map to these blocks, in each of 3 passes
    pipe = transfer._Pipeline(torch, torch.device("cpu"), 2 * 4, transfer.GATHER_CHUNKS_CPU)
    damaged = {lo % 4 for lo, _ in pipe.bounds}
    assert gather is not None and gather.bad_blocks == 3 * len(damaged) > 0
    assert not result.ok
    others = [r for r in result.rows if r is not gather]
    assert all(r.bad_blocks == 0 for r in others)


def test_bad_blocks_counts_blocks_not_pages() -> None:
    layers, blocks, width = 3, 5, 16
    expected = torch.arange(layers * blocks * width, dtype=torch.int64).view(layers * blocks, width)
    got = expected.clone()
    got[0 * blocks + 2, 7] = -1  # block 2, layer 0
    got[2 * blocks + 2, 0] = -1  # block 2, layer 2
    got[1 * blocks + 4, 15] = -1  # block 4, layer 1
    assert transfer._bad_blocks(got, expected, layers, blocks) == 2


def test_overlap_fraction_formula() -> None:
    def ov(transfer_s: float, compute_s: float, both_s: float) -> float:
        return OverlapResult(2, 256, 64, 128, transfer_s, compute_s, both_s, 1, 0).overlap_fraction

    assert ov(1.0, 4.0, 4.0) == 1.0  # fully hidden
    assert ov(1.0, 4.0, 5.0) == 0.0  # serialised
    assert ov(2.0, 4.0, 5.0) == 0.5
    assert ov(1.0, 4.0, 3.0) == 1.0  # clamped
    assert ov(1.0, 4.0, 9.0) == 0.0


def test_bad_arguments() -> None:
    from vramctl.core.errors import BadInputError

    with pytest.raises(BadInputError):
        run_transfer_bench(device="tpu", page_bytes=4096, layers=1, num_blocks=1)
    with pytest.raises(BadInputError):
        run_transfer_bench(device="cpu", page_bytes=0, layers=1, num_blocks=1)
    with pytest.raises(BadInputError, match="--repeat 0"):
        run_transfer_bench(device="cpu", page_bytes=4096, layers=1, num_blocks=1, repeat=0)


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")
def test_cuda_requested_without_cuda() -> None:
    from vramctl.core.errors import NoDeviceError

    with pytest.raises(NoDeviceError):
        run_transfer_bench(device="cuda", page_bytes=4096, layers=1, num_blocks=1)


def test_report_json_on_cpu(tmp_path: Any) -> None:
    report = run_tiers_bench(
        geometry=BenchGeometry(label="test", page_bytes=8192, layers=2),
        device="cpu",
        device_blocks=4,
        disk_blocks=4,
        directory=str(tmp_path),
        repeat=1,
    )
    data = report.to_json()
    json.dumps(data, allow_nan=False)
    assert data["device"]["device"] == "cpu" and data["link"]["nominal_bytes_per_s"] is None
    assert all(row["vs_link"] is None for row in data["device"]["rows"])
    assert set(data["tiers"]) <= {"disk-direct", "disk-buffered"}


# ------------------------------------------------------------------------------------------ CUDA


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_gpu_three_methods_pinned_and_pageable_verified() -> None:
    # Llama-3-8B geometry: 32 layers × 64 KiB pages, 128 blocks = 256 MiB per transfer
    result = run_transfer_bench(device="cuda", page_bytes=65536, layers=32, num_blocks=128, repeat=3)
    assert result.ok, [r.to_json() for r in result.rows if r.bad_blocks]
    tiers = {r.tier for r in result.rows}
    assert tiers == {HOST_PINNED, HOST_PAGEABLE}
    for direction in (OFFLOAD, LOAD):
        contiguous = result.row(HOST_PINNED, direction, CONTIGUOUS)
        gather = result.row(HOST_PINNED, direction, GATHER)
        per_block = result.row(HOST_PINNED, direction, PER_BLOCK)
        assert contiguous is not None and gather is not None and per_block is not None
        assert contiguous.bytes_per_s > 5e9  # any PCIe Gen3 x16 or better
        # issue 5 target: gather ≥ 85% of the contiguous pinned copy; the test's sanity bound is looser
        ratio = result.baseline_ratio(gather)
        assert ratio is not None and ratio >= 0.6, ratio
        assert per_block.copies == 32 * 128
    assert result.overlap is not None and result.overlap.bad_blocks == 0
    assert 0.0 <= result.overlap.overlap_fraction <= 1.0
    assert result.latency_s is not None and result.latency_s < 0.01


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_gpu_cli_json_under_a_minute(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from vramctl.cli.main import main
    from vramctl.tiers.bandwidths import parse_bandwidths

    start = time.perf_counter()
    code = main(["tiers", "bench", "--device", "cuda", "--json", "--dir", str(tmp_path)])
    elapsed = time.perf_counter() - start
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    parsed = parse_bandwidths(data)
    pinned = parsed.get(HOST_PINNED)
    assert pinned is not None and pinned.verified and pinned.read_bytes_per_s > 5e9
    assert data["device"]["overlap"] is not None
    assert elapsed < 60, elapsed


def _synthetic_cuda_result(bad: int = 0) -> Any:
    """A CUDA-shaped result (numbers made up for the test) to exercise report, JSON and bandwidths paths."""
    rows = []
    rates = {PER_BLOCK: 12e9, GATHER: 48e9, CONTIGUOUS: 50e9}
    for tier, scale in ((HOST_PINNED, 1.0), (HOST_PAGEABLE, 0.4)):
        for direction in (OFFLOAD, LOAD):
            for method, rate in rates.items():
                nbytes = 256 * 2**20
                rows.append(
                    transfer.TransferRow(
                        tier=tier,
                        direction=direction,
                        method=method,
                        bytes_moved=nbytes,
                        seconds=(nbytes / (rate * scale),) * 3,
                        copies=4096 if method == PER_BLOCK else (2 if method == GATHER else 1),
                        verified_blocks=512
                        - (bad if (tier, direction, method) == (HOST_PINNED, LOAD, GATHER) else 0),
                        bad_blocks=bad if (tier, direction, method) == (HOST_PINNED, LOAD, GATHER) else 0,
                    )
                )
    return transfer.TransferBenchResult(
        device="cuda",
        device_name="NVIDIA H200",
        layers=32,
        page_bytes=65536,
        num_blocks=128,
        pool_blocks=256,
        repeat=3,
        rows=tuple(rows),
        overlap=OverlapResult(32, 2048, 4096, 14336, 0.005, 0.020, 0.0205, 384, 0),
        latency_s=1.5e-5,
    )


def test_cuda_shaped_report_json_and_bandwidths() -> None:
    from vramctl.render.bench import render_bench
    from vramctl.tiers.bandwidths import parse_bandwidths

    report = transfer.TiersBenchReport(
        geometry=BenchGeometry(label="llama", page_bytes=65536, layers=32, block_size=16),
        disk=None,
        device=_synthetic_cuda_result(),
        environment={"device": "NVIDIA H200"},
        link_bytes_per_s=64e9,
        link_source="h200: PCIe Gen5 x16",
    )
    data = report.to_json()
    json.dumps(data, allow_nan=False)
    parsed = parse_bandwidths(data)
    pinned = parsed.get(HOST_PINNED)
    pageable = parsed.get(HOST_PAGEABLE)
    assert pinned is not None and pageable is not None
    assert pinned.read_bytes_per_s == pytest.approx(48e9) and pinned.write_bytes_per_s == pytest.approx(48e9)
    assert pinned.verified and pinned.latency_s == pytest.approx(1.5e-5) and pageable.latency_s is None
    assert pageable.read_bytes_per_s == pytest.approx(0.4 * 48e9)
    gather_row = next(r for r in data["device"]["rows"] if r["method"] == GATHER and r["tier"] == HOST_PINNED)
    assert gather_row["vs_contiguous"] == pytest.approx(0.96) and gather_row["vs_link"] == pytest.approx(0.75)
    assert data["device"]["overlap"]["overlap_fraction"] == pytest.approx(0.9)
    text = render_bench(report)
    assert "host tier on NVIDIA H200 (cuda)" in text and "link nominal 64.0 GB/s" in text
    assert "90% of the transfer hidden" in text and "latency: 15.0 µs" in text
    assert "ok: all" in text


def test_cuda_shaped_report_with_a_bad_block_is_not_verified() -> None:
    from vramctl.tiers.bandwidths import parse_bandwidths

    report = transfer.TiersBenchReport(
        geometry=BenchGeometry(label="llama", page_bytes=65536, layers=32),
        disk=None,
        device=_synthetic_cuda_result(bad=1),
        environment={},
    )
    assert not report.ok and report.bad_blocks == 1
    pinned = parse_bandwidths(report.to_json()).get(HOST_PINNED)
    assert pinned is not None and pinned.verified is False
