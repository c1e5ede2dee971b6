"""`explain-oom LOG --timeline FILE`: the recorded samples joined to the failure.

The failure's time is the log's last timestamp (vLLM `INFO 12-02 07:35:46`, SGLang `[2025-12-02 07:35:46]`),
turned into UTC with the recorder's UTC offset; when the log has none, or it falls outside the timeline,
it is the server's death in the timeline (the first `down` sample after it was up), else the last sample.
The samples of the server's last life before the failure are analysed with `vramctl.watch.trends`: a leak,
a neighbour or fragmentation is then named from the time series, with its numbers as evidence.
"""

from __future__ import annotations

import calendar
import itertools
import math
import re
import time
from dataclasses import dataclass
from typing import Any

from vramctl.watch.ring import Timeline
from vramctl.watch.sample import DOWN, RESTARTED, Sample
from vramctl.watch.trends import (
    FRAGMENTATION,
    IMBALANCE,
    KV_EXHAUSTED,
    MEMORY_LEAK,
    NEIGHBOUR,
    Alarm,
    TrendConfig,
    analyse,
)

_PRIORITY = (MEMORY_LEAK, NEIGHBOUR, IMBALANCE, FRAGMENTATION, KV_EXHAUSTED)
_VLLM_TIME = re.compile(r"\b(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})\b")
_ISO_TIME = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})\b")
TAIL_BYTES = 256 * 1024
JOIN_SLACK_S = 120.0


def last_log_time(tail: str, *, year: int, utc_offset_s: int) -> float | None:
    """The last timestamp in a log's tail as UTC seconds (local time minus the recorder's offset)."""
    best: tuple[int, float] | None = None
    for match in _ISO_TIME.finditer(tail):
        y, mo, d, h, mi, s = (int(g) for g in match.groups())
        best = _later(best, match.start(), (y, mo, d, h, mi, s), utc_offset_s)
    for match in _VLLM_TIME.finditer(tail):
        mo, d, h, mi, s = (int(g) for g in match.groups())
        best = _later(best, match.start(), (year, mo, d, h, mi, s), utc_offset_s)
    return None if best is None else best[1]


def _later(
    best: tuple[int, float] | None, pos: int, parts: tuple[int, int, int, int, int, int], offset: int
) -> tuple[int, float] | None:
    y, mo, d, h, mi, s = parts
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61):
        return best
    value = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - offset
    if best is None or pos >= best[0]:
        return (pos, float(value))
    return best


@dataclass(frozen=True)
class TimelineDiagnosis:
    cause: str | None
    """The timeline's cause label (explain-oom's taxonomy), or None when the series shows no trend."""
    failure_t: float
    joined_by: str
    samples: int
    span_s: float
    alarms: tuple[Alarm, ...]
    dropped_partial_lines: int
    last_sample: Sample | None

    def to_json(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "failure_t": self.failure_t,
            "joined_by": self.joined_by,
            "samples": self.samples,
            "span_s": self.span_s,
            "dropped_partial_lines": self.dropped_partial_lines,
            "alarms": [a.to_json() for a in self.alarms],
            "last_terms": None if self.last_sample is None else dict(self.last_sample.terms),
        }


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def diagnose_timeline(
    timeline: Timeline, *, log_tail: str | None = None, config: TrendConfig | None = None
) -> TimelineDiagnosis:
    samples = timeline.samples
    first_t = samples[0].t
    year = time.gmtime(first_t + timeline.utc_offset_s).tm_year
    log_t = None if log_tail is None else last_log_time(log_tail, year=year, utc_offset_s=timeline.utc_offset_s)
    start, end = samples[0].t - JOIN_SLACK_S, samples[-1].t + JOIN_SLACK_S
    death = _death(samples)
    if log_t is not None and start <= log_t <= end:
        failure_t, joined = log_t, f"the log's last time, {_utc(log_t)}"
    elif death is not None:
        failure_t = death
        joined = f"the server's death in the timeline, {_utc(death)}"
        if log_t is not None:
            joined += f" (the log's last time, {_utc(log_t)}, is outside the timeline)"
    else:
        failure_t, joined = samples[-1].t, f"the timeline's last sample, {_utc(samples[-1].t)}"
    before = [s for s in samples if s.t <= failure_t + 1e-6]
    life_start = max((i for i, s in enumerate(before) if s.status == RESTARTED), default=0)
    life = before[life_start:]
    up = [s for s in life if s.up]
    cfg = config or TrendConfig(window_s=math.inf)
    report = analyse(life, cfg)
    ranked = sorted(report.alarms, key=lambda a: _PRIORITY.index(a.cause) if a.cause in _PRIORITY else 99)
    return TimelineDiagnosis(
        cause=ranked[0].cause if ranked else None,
        failure_t=failure_t,
        joined_by=joined,
        samples=len(up),
        span_s=report.span_s,
        alarms=tuple(ranked),
        dropped_partial_lines=timeline.dropped_partial_lines,
        last_sample=up[-1] if up else None,
    )


def _death(samples: tuple[Sample, ...]) -> float | None:
    """The time of the last up → down transition (the server died there), if any."""
    death = None
    for before, after in itertools.pairwise(samples):
        if before.up and after.status == DOWN:
            death = after.t
    return death


def read_log_tail(log: str, limit: int = TAIL_BYTES) -> str | None:
    """The last `limit` bytes of a plain log file (None for standard input or a gzip file: no time to join)."""
    if log == "-":
        return None
    try:
        with open(log, "rb") as handle:
            if handle.read(2) == b"\x1f\x8b":
                return None
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None


def explain_timeline(timeline_path: str, log: str) -> TimelineDiagnosis:
    """`explain-oom LOG --timeline FILE`: read the ring (TimelineError, exit 2, when damaged) and join it."""
    from vramctl.watch.ring import read_timeline

    return diagnose_timeline(read_timeline(timeline_path), log_tail=read_log_tail(log))
