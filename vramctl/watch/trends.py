"""Trends and alarms over a window of samples, labelled with explain-oom's causes.

- memory-leak: the server's memory outside weights and the KV pool (`transient`) grows steadily (a straight
  line fits: R² ≥ 0.8) while the load stays steady; reported with its rate and the time until free
  memory runs out at that rate.
- allocator-fragmentation: the same term grows in steps at load peaks and is not given back when the load
  falls (the caching allocator keeps reserved-but-unallocated blocks); reported with the growth.
- gpu-util-exceeds-free-memory / multi-gpu-imbalance: another process on the device grows (a neighbour);
  the second label when the growth is on some GPUs of several only.
- kv-pool-exhausted-runtime: KV usage pinned near full (≥ 95 % in at least half the window) while the
  engine preempts (vLLM `num_preemptions`) or retracts (SGLang `num_retracted_*`).

Every alarm states the numbers and a fix with a number. Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vramctl.core.units import MiB, format_bytes
from vramctl.core.verdicts import Verdict
from vramctl.watch.devices import DeviceMemory
from vramctl.watch.sample import TRANSIENT, Sample

MEMORY_LEAK = "memory-leak"
FRAGMENTATION = "allocator-fragmentation"
NEIGHBOUR = str(Verdict.GPU_UTIL_EXCEEDS_FREE)
IMBALANCE = "multi-gpu-imbalance"
KV_EXHAUSTED = "kv-pool-exhausted-runtime"


@dataclass(frozen=True)
class TrendConfig:
    window_s: float = 300.0
    """Only samples this close to the last one count."""
    min_samples: int = 5
    min_span_s: float = 10.0
    min_growth_bytes: int = 16 * MiB
    min_growth_fraction: float = 0.002
    """A growth must also be this fraction of the device's capacity (0.2 % of 80 GiB = 164 MiB)."""
    leak_r2: float = 0.8
    kv_full: float = 0.95
    kv_pinned_fraction: float = 0.5


@dataclass(frozen=True)
class Fit:
    slope: float
    intercept: float
    r2: float


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> Fit:
    """Least squares y = slope·x + intercept, with R² (1.0 for a flat line that fits exactly)."""
    n = len(xs)
    if n < 2:
        return Fit(0.0, ys[0] if ys else 0.0, 0.0)
    mx = sum(xs) / n
    my = sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return Fit(0.0, my, 0.0)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    r2 = 1.0 if ss_tot == 0 else max(0.0, 1.0 - ss_res / ss_tot)
    return Fit(slope, intercept, r2)


@dataclass(frozen=True)
class Alarm:
    cause: str
    """One of explain-oom's cause labels (docs/explain-oom.md)."""
    summary: str
    evidence: tuple[str, ...]
    fix: str
    growth_bytes: int = 0
    rate_bytes_per_s: float | None = None
    time_to_exhaustion_s: float | None = None
    device_index: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "growth_bytes": self.growth_bytes,
            "rate_bytes_per_s": self.rate_bytes_per_s,
            "time_to_exhaustion_s": self.time_to_exhaustion_s,
            "device_index": self.device_index,
        }


@dataclass(frozen=True)
class TrendReport:
    samples: int
    span_s: float
    transient_rate_bytes_per_s: float
    """The fitted slope of the server's transient memory over the window (whether or not it is a leak)."""
    other_rate_bytes_per_s: float
    alarms: tuple[Alarm, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "span_s": self.span_s,
            "transient_rate_bytes_per_s": self.transient_rate_bytes_per_s,
            "other_rate_bytes_per_s": self.other_rate_bytes_per_s,
            "alarms": [a.to_json() for a in self.alarms],
        }


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / MiB:.2f} MiB/s"


def window(samples: Sequence[Sample], window_s: float) -> list[Sample]:
    up = [s for s in samples if s.up and s.devices]
    if not up:
        return []
    end = up[-1].t
    return [s for s in up if s.t >= end - window_s]


def _threshold(config: TrendConfig, capacity: int) -> int:
    return max(config.min_growth_bytes, int(config.min_growth_fraction * capacity))


def _steady_load(win: Sequence[Sample]) -> bool:
    points = [(s.t, s.engine.running + s.engine.waiting) for s in win if s.engine is not None]
    if len(points) < 3:
        return True
    fit = linear_fit([p[0] for p in points], [float(p[1]) for p in points])
    span = points[-1][0] - points[0][0]
    mean = statistics.fmean(p[1] for p in points)
    return abs(fit.slope * span) <= max(1.0, 0.5 * mean)


def _steps(ts: Sequence[float], ys: Sequence[float], loads: Sequence[float | None], rise: float) -> bool:
    """True when the growth came in a few steps at load peaks and stayed (the allocator's ratchet)."""
    deltas = [ys[i + 1] - ys[i] for i in range(len(ys) - 1)]
    positive = sorted((d for d in deltas if d > 0), reverse=True)
    total = sum(positive)
    if total <= 0:
        return False
    k = max(1, math.ceil(0.1 * len(deltas)))
    if sum(positive[:k]) < 0.7 * total:
        return False
    known = [x for x in loads if x is not None]
    if not known:
        return False
    median = statistics.median(known)
    big = [i for i, d in enumerate(deltas) if d >= max(0.05 * rise, positive[min(k, len(positive)) - 1])]
    at_peak = 0
    for i in big:
        near = [x for x in loads[max(0, i - 1) : i + 3] if x is not None]
        if near and max(near) > 0 and max(near) > median:
            at_peak += 1
    if at_peak * 2 < len(big):
        return False
    last_step = max(big)
    return min(ys[last_step + 1 :]) >= ys[0] + 0.5 * rise


def _utilisation_fix(engine: str | None, capacity: int, neighbour_peak: int, kind: str = "cuda") -> str:
    margin = max(256 * MiB, int(0.02 * capacity))
    if kind != "cuda":
        left = max(0, capacity - neighbour_peak - margin)
        return (
            f"stop or move the other process, or cap it (a cgroup memory.max); the server can count on "
            f"{format_bytes(left)} (capacity − the neighbour's {format_bytes(neighbour_peak)} − a "
            f"{format_bytes(margin)} margin): keep VLLM_CPU_KVCACHE_SPACE plus the weights under it"
        )
    room = max(0.0, (capacity - neighbour_peak - margin) / capacity)
    value = math.floor(room * 100) / 100
    flag = "--mem-fraction-static" if engine == "sglang" else "--gpu-memory-utilization"
    return (
        f"stop or move the other process, or restart the server with {flag} {value:.2f} "
        f"(capacity − the neighbour's {format_bytes(neighbour_peak)} − a {format_bytes(margin)} margin)"
    )


def analyse(samples: Sequence[Sample], config: TrendConfig = TrendConfig()) -> TrendReport:
    """Trends over the last `config.window_s` seconds of up samples, and the alarms they raise."""
    win = window(samples, config.window_s)
    if len(win) < 2:
        return TrendReport(len(win), 0.0, 0.0, 0.0, ())
    ts = [s.t for s in win]
    span = ts[-1] - ts[0]
    primary = win[-1].primary
    assert primary is not None
    capacity = primary.capacity_bytes
    engine_name = next((s.engine.engine for s in reversed(win) if s.engine is not None), None)
    transient = [float(s.term(TRANSIENT)) for s in win]
    others = [float(s.primary.other_bytes) if s.primary else 0.0 for s in win]
    t_fit = linear_fit(ts, transient)
    o_fit = linear_fit(ts, others)
    alarms: list[Alarm] = []
    enough = len(win) >= config.min_samples and span >= config.min_span_s
    threshold = _threshold(config, capacity)
    free_now = win[-1].term("free")
    if enough:
        loads: list[float | None] = [
            None if s.engine is None else float(s.engine.running + s.engine.waiting) for s in win
        ]
        rise = transient[-1] - transient[0]
        growth = t_fit.slope * span
        if rise >= threshold and _steps(ts, transient, loads, rise):
            alarms.append(_fragmentation(win, rise, primary))
        elif growth >= threshold and t_fit.r2 >= config.leak_r2 and _steady_load(win):
            alarms.append(_leak(win, t_fit, growth, span, free_now, primary))
        alarms.extend(_neighbours(win, config, engine_name))
    kv = _kv_pinned(win, config, engine_name)
    if kv is not None:
        alarms.append(kv)
    return TrendReport(len(win), span, t_fit.slope, o_fit.slope, tuple(alarms))


def _leak(win: Sequence[Sample], fit: Fit, growth: float, span: float, free_now: int, dev: DeviceMemory) -> Alarm:
    rate = fit.slope
    tte = free_now / rate if rate > 0 else None
    first, last = win[0].term(TRANSIENT), win[-1].term(TRANSIENT)
    where = "GPU" if dev.kind == "cuda" else "host"
    evidence = (
        f"the server's memory outside weights and the KV pool grew {format_bytes(last - first)} in {_duration(span)} "
        f"({format_bytes(first)} → {format_bytes(last)}): {_rate(rate)}, a straight line (R² {fit.r2:.2f})",
        f"load steady: {win[0].engine.running if win[0].engine else '?'} → "
        f"{win[-1].engine.running if win[-1].engine else '?'} running requests",
        f"{format_bytes(free_now)} {where} memory free",
    )
    if tte is not None:
        fix = (
            f"restart the server within {_duration(0.8 * tte)} (80 % of the {_duration(tte)} until the free "
            f"{format_bytes(free_now)} is gone at {_rate(rate)}), then upgrade the engine or report the leak with this timeline"
        )
    else:
        fix = "upgrade the engine or report the leak with this timeline; keep a restart policy"
    summary = f"memory grows {_rate(rate)} at steady load" + (
        f": free memory runs out in {_duration(tte)}" if tte is not None else ""
    )
    return Alarm(MEMORY_LEAK, summary, evidence, fix, int(growth), rate, tte, dev.index)


def _fragmentation(win: Sequence[Sample], rise: float, dev: DeviceMemory) -> Alarm:
    first, last = win[0].term(TRANSIENT), win[-1].term(TRANSIENT)
    peak_load = max((s.engine.running + s.engine.waiting for s in win if s.engine), default=0)
    evidence = (
        f"the server's memory outside weights and the KV pool rose {format_bytes(int(rise))} "
        f"({format_bytes(first)} → {format_bytes(last)}) in a few steps at load peaks (up to {peak_load} requests)",
        "and was not given back when the load fell: reserved but unallocated blocks kept by the allocator",
    )
    keep = format_bytes(int(rise))
    if dev.kind == "cuda":
        fix = f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or keep {keep} more headroom (lower the utilisation by that much)"
    else:
        fix = f"keep {keep} more host headroom; a host allocator that returns memory (MALLOC_ARENA_MAX=2, or jemalloc)"
    return Alarm(
        FRAGMENTATION,
        f"memory held after load peaks grew {keep} in steps",
        evidence,
        fix,
        int(rise),
        None,
        None,
        dev.index,
    )


def _neighbours(win: Sequence[Sample], config: TrendConfig, engine: str | None) -> list[Alarm]:
    indexes = sorted({d.index for s in win for d in s.devices})
    grown: list[tuple[int, int, float, DeviceMemory, DeviceMemory]] = []
    for index in indexes:
        series = [(s.t, d) for s in win for d in s.devices if d.index == index]
        if len(series) < config.min_samples:
            continue
        first, last = series[0][1], series[-1][1]
        rise = last.other_bytes - first.other_bytes
        if rise < _threshold(config, last.capacity_bytes):
            continue
        fit = linear_fit([t for t, _ in series], [float(d.other_bytes) for _, d in series])
        grown.append((index, rise, fit.slope, first, last))
    alarms = []
    for index, rise, slope, first, last in grown:
        multi = len(indexes) > 1 and len(grown) < len(indexes)
        tte = last.free_bytes / slope if slope > 0 else None
        peak = max(d.other_bytes for s in win for d in s.devices if d.index == index)
        what = "GPU" if last.kind == "cuda" else "host"
        evidence = (
            f"other processes on {what} {index} grew {format_bytes(rise)} "
            f"({format_bytes(first.other_bytes)} → {format_bytes(last.other_bytes)}, {_rate(slope)})",
            f"the server's own memory: {format_bytes(first.server_bytes)} → {format_bytes(last.server_bytes)}; "
            f"{format_bytes(last.free_bytes)} free",
        ) + (
            (f"the other {len(indexes) - len(grown)} GPU(s) show no such growth",) if multi else ()
        )
        alarms.append(
            Alarm(
                IMBALANCE if multi else NEIGHBOUR,
                f"a neighbour on {what} {index} grew {format_bytes(rise)}"
                + (f": free memory runs out in {_duration(tte)}" if tte is not None else ""),
                evidence,
                _utilisation_fix(engine, last.capacity_bytes, peak, last.kind),
                rise,
                slope,
                tte,
                index,
            )
        )
    return alarms


def _kv_pinned(win: Sequence[Sample], config: TrendConfig, engine: str | None) -> Alarm | None:
    with_kv = [s for s in win if s.engine is not None and s.engine.kv_usage is not None]
    if len(with_kv) < max(2, config.min_samples // 2):
        return None
    pinned = [s for s in with_kv if (s.engine.kv_usage or 0.0) >= config.kv_full]  # type: ignore[union-attr]
    if len(pinned) < config.kv_pinned_fraction * len(with_kv):
        return None
    preempted = 0.0
    previous: float | None = None
    for s in with_kv:
        assert s.engine is not None
        value = s.engine.preemptions_total
        if value is not None:
            if previous is not None:
                preempted += value - previous if value >= previous else value  # a reset: the server restarted
            previous = value
        elif s.engine.retracted_recent:
            preempted += s.engine.retracted_recent
    if preempted <= 0:
        return None
    running = [s.engine.running for s in pinned if s.engine is not None and s.engine.running > 0]
    median_running = statistics.median(running) if running else 1
    cap = max(1, math.floor(0.9 * median_running))
    flag = "--max-running-requests" if engine == "sglang" else "--max-num-seqs"
    last = with_kv[-1].engine
    assert last is not None
    pool = f" of {last.kv_pool_tokens:,} tokens" if last.kv_pool_tokens else ""
    word = "retracted" if engine == "sglang" else "preempted"
    evidence = (
        f"KV usage ≥ {config.kv_full:.0%} in {len(pinned)} of {len(with_kv)} samples (pool{pool})",
        f"{preempted:.0f} requests {word} in the window, with {median_running:g} running at full usage",
    )
    return Alarm(
        KV_EXHAUSTED,
        f"the KV pool is pinned full and the engine {word} {preempted:.0f} requests",
        evidence,
        f"{flag} {cap} (90 % of the {median_running:g} requests the full pool held), or a larger KV pool",
        0,
        None,
        None,
        None,
    )
