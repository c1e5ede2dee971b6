"""Text for `vramctl tiers bench`: the transfer table, the disk table, the overlap line, the verdict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vramctl.core.units import format_bytes, format_count


def _gbps(bytes_per_s: float | None) -> str:
    return "-" if bytes_per_s is None else f"{bytes_per_s / 1e9:.2f}"


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.0f}%"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def render_bench(report: Any, *, saved_to: str | None = None) -> str:
    """The human report of a TiersBenchReport (vramctl.measure.transfer)."""
    geo = report.geometry
    out: list[str] = []
    layers = f"{geo.layers} layers × {format_bytes(geo.page_bytes)} pages" if geo.layers > 1 else "one page"
    out.append(f"vramctl tiers bench: {geo.label}: one KV block = {format_bytes(geo.block_bytes)} ({layers})")

    dev = report.device
    if dev is not None:
        out.append("")
        link = ""
        if report.link_bytes_per_s:
            link = f"; link nominal {report.link_bytes_per_s / 1e9:.1f} GB/s per direction ({report.link_source})"
        out.append(
            f"host tier on {dev.device_name} ({dev.device}): {dev.num_blocks} blocks scattered in a pool of "
            f"{dev.pool_blocks}, {format_bytes(dev.num_blocks * dev.block_bytes)} per transfer, "
            f"median of {dev.repeat}{link}"
        )
        rows = []
        for row in dev.rows:
            rows.append(
                [
                    row.tier,
                    "load (host→pool)" if row.direction == "load" else "offload (pool→host)",
                    row.method,
                    _gbps(row.bytes_per_s),
                    _pct(dev.baseline_ratio(row)),
                    _pct(report.link_ratio(row)),
                    format_count(row.copies),
                    f"{format_count(row.verified_blocks)}/{format_count(row.verified_blocks + row.bad_blocks)}",
                ]
            )
        out.extend(
            _table(
                ["tier", "direction", "method", "GB/s", "vs contiguous", "vs link", "copies", "verified"],
                rows,
                right={3, 4, 5, 6, 7},
            )
        )
        if dev.overlap is not None:
            ov = dev.overlap
            out.append(
                f"per-layer load-back on a side stream, {ov.layers} layers, {ov.tokens} tokens of "
                f"{ov.hidden_size}×{ov.intermediate_size} matmuls per layer: transfer {ov.transfer_s * 1e3:.2f} ms, "
                f"compute {ov.compute_s * 1e3:.2f} ms, both {ov.overlapped_s * 1e3:.2f} ms → "
                f"{ov.overlap_fraction:.0%} of the transfer hidden"
            )
        if dev.latency_s is not None:
            out.append(f"one-page host→device copy latency: {dev.latency_s * 1e6:.1f} µs (median)")
        for note in dev.notes:
            out.append(f"note: {note}")

    disk = report.disk
    if disk is not None:
        out.append("")
        layout = disk.layout
        out.append(
            f"disk tier in {disk.directory} ({disk.filesystem}): {format_count(layout.num_blocks)} blocks, "
            f"{format_bytes(layout.file_bytes)} file, {format_bytes(layout.chunk_bytes)} per I/O, "
            f"{layout.checksum} per block, median of {disk.repeat}"
        )
        rows = []
        for method in disk.methods:
            if not method.measured:
                rows.append([method.tier_name, "-", "-", "-", "-", "not measured"])
                continue
            base = method.baseline
            rows.append(
                [
                    method.tier_name,
                    "write+fsync",
                    _gbps(method.write.bytes_per_s if method.write else None),
                    "-",
                    "-",
                    "",
                ]
            )
            rows.append(
                [
                    method.tier_name,
                    "read+verify",
                    _gbps(method.read.bytes_per_s if method.read else None),
                    _gbps(base.bytes_per_s) if base else "-",
                    _pct(method.ratio_to_baseline),
                    f"{format_count(method.verified_blocks)}/"
                    f"{format_count(method.verified_blocks + len(method.bad_blocks))}",
                ]
            )
        out.extend(_table(["tier", "op", "GB/s", "dd GB/s", "vs dd", "verified"], rows, right={2, 3, 4, 5}))
        for method in disk.methods:
            if method.baseline_command:
                out.append(f"{method.tier_name} baseline: {method.baseline_command}")
            if method.baseline_note:
                out.append(f"{method.tier_name} baseline: {method.baseline_note}")
            if method.note:
                out.append(f"{method.tier_name}: {method.note}")
            if method.latency_s is not None:
                out.append(
                    f"{method.tier_name}: one 4 KiB read latency {method.latency_s * 1e6:.0f} µs (median)"
                )
            for bad in method.bad_blocks[:10]:
                out.append(
                    f"{method.tier_name}: block {bad.index} failed verification ({bad.reason}): not served"
                )
            if len(method.bad_blocks) > 10:
                out.append(f"{method.tier_name}: … and {len(method.bad_blocks) - 10} more bad blocks")
        for note in disk.notes:
            out.append(f"note: {note}")
        for path in disk.kept_files:
            out.append(f"kept: {path}")

    for note in report.notes:
        out.append(f"note: {note}")
    out.append("")
    if report.ok:
        verdict = f"ok: all {format_count(report.verified_blocks)} block reads verified"
    else:
        verdict = (
            f"FAILED: {format_count(report.bad_blocks)} corrupted or torn blocks detected "
            f"({format_count(report.verified_blocks)} verified); the bandwidths were not saved"
        )
    out.append(verdict)
    if saved_to:
        out.append(f"saved: {saved_to} (use it with `vramctl tiers plan --bandwidths {saved_to}`)")
    return "\n".join(out)
