"""The watch loop: sample at an interval, keep a window, analyse trends, record, publish.

No printing here: the caller passes `on_sample(sample, report, events)`; the CLI renders, tests assert.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from vramctl.core.errors import BadInputError
from vramctl.watch.ring import RingRecorder
from vramctl.watch.sample import Sample
from vramctl.watch.sampler import Event, Sampler
from vramctl.watch.trends import TrendConfig, TrendReport, analyse

MAX_WINDOW_SAMPLES = 100_000


class ServerDownError(BadInputError):
    """The server stayed unreachable past --down-timeout. Exit 2."""


@dataclass
class WatchResult:
    samples: int = 0
    last: Sample | None = None
    report: TrendReport | None = None
    events: list[Event] = field(default_factory=list)


def watch_loop(
    sampler: Sampler,
    *,
    interval_s: float,
    config: TrendConfig,
    duration_s: float | None = None,
    max_samples: int | None = None,
    down_timeout_s: float = 60.0,
    recorder: RingRecorder | None = None,
    on_sample: Callable[[Sample, TrendReport, list[Event]], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> WatchResult:
    """Sample until `duration_s` / `max_samples` (or forever). A first scrape that fails, and a server down
    longer than `down_timeout_s`, raise ServerDownError; a restart is an event and the watch goes on."""
    keep = min(MAX_WINDOW_SAMPLES, max(16, int(config.window_s / max(interval_s, 1e-3)) + 2))
    history: collections.deque[Sample] = collections.deque(maxlen=keep)
    result = WatchResult()
    start = monotonic()
    down_since: float | None = None
    next_tick = start
    seen_events = 0
    while True:
        sample = sampler.step()
        if not sample.up:
            if result.samples == 0:
                raise ServerDownError(f"{sample.error}: is the server running, and is this its address?")
            down_since = sample.t if down_since is None else down_since
            if sample.t - down_since > down_timeout_s:
                raise ServerDownError(
                    f"server down for {sample.t - down_since:.0f} s (> --down-timeout {down_timeout_s:g}): {sample.error}"
                )
        else:
            down_since = None
        history.append(sample)
        report = analyse(history, config)
        if recorder is not None:
            recorder.append(sample)
        result.samples += 1
        result.last = sample
        result.report = report
        new_events = sampler.events[seen_events:]
        seen_events = len(sampler.events)
        result.events.extend(new_events)
        if on_sample is not None:
            on_sample(sample, report, new_events)
        if max_samples is not None and result.samples >= max_samples:
            return result
        next_tick += interval_s
        now = monotonic()
        if duration_s is not None and next_tick - start > duration_s:
            return result
        if next_tick > now:
            sleep(next_tick - now)
        else:
            next_tick = now  # fell behind (a slow scrape): do not burst

