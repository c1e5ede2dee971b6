"""The watch's views: a rich table of the live ledger, a one-line text form for pipes, the timeline panel."""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from vramctl.core.units import format_bytes
from vramctl.watch.sample import FREE, WATCH_TERMS, Sample
from vramctl.watch.sampler import Event
from vramctl.watch.timeline import TimelineDiagnosis
from vramctl.watch.trends import Alarm, TrendReport

_LABELS = {
    "other_processes": "other processes",
    "weights": "weights",
    "kv_cache": "KV pool",
    "transient": "activation / transient / non-torch",
    FREE: "free",
}


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def engine_line(sample: Sample) -> str:
    e = sample.engine
    if e is None:
        return f"server {sample.status}: {sample.error}"
    kv = "?" if e.kv_usage is None else f"{e.kv_usage:.1%}"
    pre = "?" if e.preemptions_total is None else f"{e.preemptions_total:.0f}"
    return f"{e.engine} ({e.names}) · KV {kv} · running {e.running} · waiting {e.waiting} · preemptions {pre}"


def sample_line(sample: Sample, report: TrendReport | None) -> str:
    """One plain line per sample (for logs and pipes)."""
    parts = [_clock(sample.t), sample.status]
    if sample.terms:
        parts.append(" ".join(f"{name}={format_bytes(sample.term(name))}" for name in WATCH_TERMS if name in sample.terms))
    parts.append(engine_line(sample))
    if report is not None:
        parts.extend(f"ALARM {a.cause}: {a.summary}" for a in report.alarms)
    return " | ".join(parts)


def alarm_table(alarms: tuple[Alarm, ...]) -> Table:
    table = Table(title="alarms", show_lines=True)
    table.add_column("cause")
    table.add_column("what")
    table.add_column("evidence")
    table.add_column("fix")
    for a in alarms:
        table.add_row(a.cause, a.summary, "\n".join(a.evidence), a.fix)
    return table


def render_sample(sample: Sample, report: TrendReport | None, events: list[Event]) -> RenderableType:
    device = sample.primary
    title = f"{_clock(sample.t)} · {device.name if device else 'no device'}"
    table = Table(title=title)
    table.add_column("term")
    table.add_column("bytes", justify="right")
    table.add_column("share", justify="right")
    capacity = device.capacity_bytes if device else 0
    for name in WATCH_TERMS:
        if name in sample.terms:
            value = sample.term(name)
            share = f"{value / capacity:.1%}" if capacity else ""
            table.add_row(_LABELS.get(name, name), format_bytes(value), share)
    if device:
        table.add_row("capacity", format_bytes(capacity), "100%")
    parts: list[RenderableType] = [table, Text(engine_line(sample))]
    if report is not None:
        parts.append(
            Text(
                f"window: {report.samples} samples over {report.span_s:.0f} s · transient "
                f"{report.transient_rate_bytes_per_s / 2**20:+.2f} MiB/s · others "
                f"{report.other_rate_bytes_per_s / 2**20:+.2f} MiB/s"
            )
        )
        if report.alarms:
            parts.append(alarm_table(report.alarms))
    parts.extend(Text(f"{_clock(e.t)} {e.message}", style="yellow") for e in events)
    return Group(*parts)


def render_timeline(diagnosis: TimelineDiagnosis) -> RenderableType:
    head = (
        f"timeline: {diagnosis.samples} samples over {diagnosis.span_s:.0f} s, joined at {diagnosis.joined_by}; "
        f"cause from the time series: {diagnosis.cause or 'no trend (no leak, neighbour or fragmentation)'}"
    )
    parts: list[RenderableType] = [Text(head)]
    if diagnosis.dropped_partial_lines:
        parts.append(Text(f"dropped {diagnosis.dropped_partial_lines} partial last line (a crash while writing)"))
    if diagnosis.alarms:
        parts.append(alarm_table(diagnosis.alarms))
    return Panel(Group(*parts), title="timeline")


def timeline_text(diagnosis: TimelineDiagnosis) -> str:
    lines = [
        f"timeline: {diagnosis.samples} samples over {diagnosis.span_s:.0f} s, joined at {diagnosis.joined_by}",
        f"timeline cause: {diagnosis.cause or 'none (no leak, neighbour or fragmentation in the series)'}",
    ]
    for a in diagnosis.alarms:
        lines.append(f"- {a.cause}: {a.summary}")
        lines.extend(f"    evidence: {e}" for e in a.evidence)
        lines.append(f"    fix: {a.fix}")
    return "\n".join(lines) + "\n"
