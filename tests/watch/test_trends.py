"""Trends and alarms on synthetic series with known answers (rates, steps, neighbours, a pinned KV pool)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.core.units import GiB, MiB
from vramctl.watch.devices import DeviceMemory
from vramctl.watch.engines import EngineMetrics
from vramctl.watch.sample import FREE, TRANSIENT, UP, Sample, ServerSizes, make_sample
from vramctl.watch.trends import (
    FRAGMENTATION,
    IMBALANCE,
    KV_EXHAUSTED,
    MEMORY_LEAK,
    NEIGHBOUR,
    TrendConfig,
    analyse,
    linear_fit,
)

CAP = 80 * GiB
SIZES = ServerSizes(weights_bytes=16 * GiB, kv_block_bytes=2 * MiB, source="llama-3-8b")


def engine(running: int = 8, kv: float = 0.4, preempt: float = 0.0, name: str = "vllm") -> EngineMetrics:
    return EngineMetrics(
        engine=name, names="x", kv_usage=kv, running=running, waiting=0, preemptions_total=preempt,
        block_size=16, num_blocks=20000,
    )


def gpu(server: int, other: int = 1 * GiB, index: int = 0) -> DeviceMemory:
    return DeviceMemory("cuda", index, f"GPU-{index}", "H100", CAP, server + other, server)


def series(server_at: list[int], *, dt: float = 1.0, running: list[int] | None = None, other: list[int] | None = None,
           kv: list[float] | None = None, preempt: list[float] | None = None) -> list[Sample]:
    out = []
    for i, s in enumerate(server_at):
        e = engine(
            running=running[i] if running else 8,
            kv=kv[i] if kv else 0.4,
            preempt=preempt[i] if preempt else 0.0,
        )
        out.append(make_sample(1000.0 + i * dt, UP, e, (gpu(s, other[i] if other else GiB),), SIZES))
    return out


BASE = 16 * GiB + 20000 * 2 * MiB + 3 * GiB  # weights + pool + transient


def test_ledger_terms_sum_to_capacity() -> None:
    (s,) = series([BASE])
    assert sum(s.terms.values()) == CAP
    assert s.term(TRANSIENT) == 3 * GiB and s.term(FREE) == CAP - BASE - GiB


def test_steady_leak_rate_and_time_to_exhaustion() -> None:
    rate = 5 * MiB  # per second
    samples = series([BASE + int(rate * i) for i in range(120)])
    report = analyse(samples, TrendConfig(window_s=300))
    (alarm,) = report.alarms
    assert alarm.cause == MEMORY_LEAK
    assert alarm.rate_bytes_per_s is not None and abs(alarm.rate_bytes_per_s - rate) < 0.01 * rate
    free = samples[-1].term(FREE)
    assert alarm.time_to_exhaustion_s is not None and abs(alarm.time_to_exhaustion_s - free / rate) < 1
    assert "restart the server within" in alarm.fix and "MiB/s" in alarm.summary


@settings(max_examples=30, deadline=None)
@given(rate_mib=st.floats(min_value=1.0, max_value=50.0), seed=st.integers(0, 10**6))
def test_noisy_leak_rate_within_20_percent(rate_mib: float, seed: int) -> None:
    rng = random.Random(seed)
    rate = rate_mib * MiB
    # 10 s apart: ≥ 590 MiB of growth in the window, above the 0.2 %-of-capacity floor (164 MiB of 80 GiB)
    samples = series([BASE + int(rate * 10 * i + rng.uniform(-8, 8) * MiB) for i in range(60)], dt=10.0)
    report = analyse(samples, TrendConfig(window_s=600))
    leaks = [a for a in report.alarms if a.cause == MEMORY_LEAK]
    assert leaks, report
    assert abs(leaks[0].rate_bytes_per_s - rate) <= 0.2 * rate  # type: ignore[operator]


def test_flat_memory_raises_nothing() -> None:
    rng = random.Random(1)
    samples = series([BASE + int(rng.uniform(-4, 4) * MiB) for _ in range(100)])
    assert analyse(samples).alarms == ()


def test_growth_that_follows_the_load_is_not_a_leak() -> None:
    running = list(range(1, 101))
    samples = series([BASE + i * 20 * MiB for i in range(100)], running=running)
    assert not [a for a in analyse(samples).alarms if a.cause == MEMORY_LEAK]


def test_fragmentation_steps_at_load_peaks() -> None:
    server, running = [], []
    level = BASE
    for i in range(100):
        peak = i % 25 == 12
        if peak:
            level += 300 * MiB  # the allocator keeps what the peak reserved
        server.append(level)
        running.append(64 if peak else 4)
    report = analyse(series(server, running=running))
    (alarm,) = [a for a in report.alarms if a.cause in (FRAGMENTATION, MEMORY_LEAK)]
    assert alarm.cause == FRAGMENTATION
    assert alarm.growth_bytes == 4 * 300 * MiB
    assert "expandable_segments:True" in alarm.fix


def test_neighbour_growth_on_one_gpu() -> None:
    other = [GiB + i * 50 * MiB for i in range(60)]
    report = analyse(series([BASE] * 60, other=other))
    (alarm,) = report.alarms
    assert alarm.cause == NEIGHBOUR and alarm.growth_bytes == 59 * 50 * MiB
    assert "--gpu-memory-utilization 0." in alarm.fix


def test_neighbour_on_one_gpu_of_two_is_imbalance() -> None:
    samples = []
    for i in range(60):
        devices = (gpu(BASE, GiB + i * 50 * MiB, 0), gpu(BASE, GiB, 1))
        samples.append(make_sample(1000.0 + i, UP, engine(), devices, SIZES))
    causes = {a.cause for a in analyse(samples).alarms}
    assert causes == {IMBALANCE}


def test_kv_pool_pinned_with_preemptions() -> None:
    n = 40
    kv = [0.99] * n
    preempt = [float(i // 4) for i in range(n)]
    report = analyse(series([BASE] * n, running=[30] * n, kv=kv, preempt=preempt))
    (alarm,) = report.alarms
    assert alarm.cause == KV_EXHAUSTED and "--max-num-seqs 27" in alarm.fix


def test_kv_full_without_preemption_is_fine() -> None:
    n = 40
    assert analyse(series([BASE] * n, kv=[0.99] * n, preempt=[3.0] * n)).alarms == ()


def test_linear_fit_exact() -> None:
    fit = linear_fit([0, 1, 2, 3], [1, 3, 5, 7])
    assert (fit.slope, fit.intercept, fit.r2) == (2.0, 1.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 1 << 42),
    used=st.integers(0, 1 << 43),
    server=st.integers(0, 1 << 43),
    weights=st.none() | st.integers(0, 1 << 42),
    pool=st.none() | st.integers(1, 1 << 42),
)
def test_the_ledger_always_sums_with_no_negative_term(
    capacity: int, used: int, server: int, weights: int | None, pool: int | None
) -> None:
    from vramctl.watch.sample import map_ledger

    dev = DeviceMemory("cpu", 0, "", "host", capacity, used, server)
    e = EngineMetrics(engine="vllm", names="x", kv_usage=0.1, running=0, waiting=0, preemptions_total=None,
                      kv_pool_bytes=pool)
    ledger = map_ledger(dev, e, ServerSizes(weights_bytes=weights))
    assert sum(t.bytes for t in ledger.terms) == capacity
    assert all(t.bytes >= 0 for t in ledger.terms), ledger


def test_sglang_pool_in_tokens_needs_bytes_per_token() -> None:
    from vramctl.watch.sample import kv_pool_bytes

    e = EngineMetrics(engine="sglang", names="x", kv_usage=0.1, running=0, waiting=0, preemptions_total=None,
                      kv_pool_tokens=200_000)
    assert kv_pool_bytes(e, ServerSizes()) is None
    assert kv_pool_bytes(e, ServerSizes(kv_token_bytes=131_072)) == 200_000 * 131_072
