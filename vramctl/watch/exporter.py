"""`watch --serve HOST:PORT`: the live ledger as Prometheus series (prometheus_client, imported lazily).

Names follow Prometheus' rules: a `vramctl_` prefix, base units (`_bytes`, `_seconds`, `_ratio`), no colons.
Labels join with the engine's own series (`model_name`, as vLLM and SGLang label theirs) and with the DCGM
exporter's per-GPU / per-pod series (`gpu`, `UUID`; add `pod`, `namespace`, `container` with `--label`):

    vramctl_memory_bytes{term="weights|kv_cache|transient|other_processes|free", gpu, UUID, model_name}
    vramctl_capacity_bytes, vramctl_headroom_bytes   (headroom = the free term)
    vramctl_server_memory_bytes                      (the server's processes on the device)
    vramctl_kv_cache_usage_ratio, vramctl_up, vramctl_restarts_total
    vramctl_alarm{cause="memory-leak|allocator-fragmentation|..."}   (1 while the alarm holds)
    vramctl_memory_growth_rate_bytes_per_second{series="transient|other_processes"}
    vramctl_time_to_exhaustion_seconds{cause}        (+Inf when nothing runs out)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.watch.sample import WATCH_TERMS, Sample
from vramctl.watch.trends import FRAGMENTATION, IMBALANCE, KV_EXHAUSTED, MEMORY_LEAK, NEIGHBOUR, TrendReport

CAUSES = (MEMORY_LEAK, FRAGMENTATION, NEIGHBOUR, IMBALANCE, KV_EXHAUSTED)


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[::1]:PORT` or `:PORT` (loopback) → (host, port)."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        raise BadInputError(f"--serve {text!r}: give HOST:PORT, e.g. 127.0.0.1:9400")
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise BadInputError(f"--serve {text!r}: the port is not a number") from None
    if not 0 <= port <= 65535:
        raise BadInputError(f"--serve {text!r}: the port {port} is outside 0–65535")
    return host, port


class WatchState:
    """The latest sample and trend report, shared between the watch loop and the scrape thread."""

    def __init__(self, extra_labels: Mapping[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self.sample: Sample | None = None
        self.report: TrendReport | None = None
        self.restarts = 0
        self.extra_labels = dict(extra_labels or {})

    def update(self, sample: Sample, report: TrendReport | None, restarted: bool) -> None:
        with self._lock:
            self.sample = sample
            self.report = report
            self.restarts += int(restarted)

    def snapshot(self) -> tuple[Sample | None, TrendReport | None, int]:
        with self._lock:
            return self.sample, self.report, self.restarts


class _Collector:
    def __init__(self, state: WatchState) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        sample, report, restarts = self.state.snapshot()
        extra = self.state.extra_labels
        base_names = ["gpu", "UUID", "model_name", *extra]
        up = GaugeMetricFamily("vramctl_up", "1 when the engine's /metrics answered the last scrape", labels=list(extra))
        up.add_metric(list(extra.values()), 0.0 if sample is None or not sample.up else 1.0)
        yield up
        restarts_family = CounterMetricFamily(
            "vramctl_restarts", "Server restarts the watch has seen", labels=list(extra)
        )
        restarts_family.add_metric(list(extra.values()), float(restarts))
        yield restarts_family
        if sample is None:
            return
        model = sample.engine.model_name if sample.engine else ""
        primary = sample.primary
        memory = GaugeMetricFamily(
            "vramctl_memory_bytes", "The device's memory by ledger term (they sum to the capacity)",
            labels=["term", *base_names],
        )
        capacity = GaugeMetricFamily("vramctl_capacity_bytes", "The device's memory capacity", labels=base_names)
        headroom = GaugeMetricFamily(
            "vramctl_headroom_bytes", "Free memory on the device (the ledger's free term)", labels=base_names
        )
        server = GaugeMetricFamily(
            "vramctl_server_memory_bytes", "Memory the server's processes hold on the device", labels=base_names
        )
        for device in sample.devices:
            values = [str(device.index), device.uuid, model, *extra.values()]
            capacity.add_metric(values, float(device.capacity_bytes))
            headroom.add_metric(values, float(device.free_bytes))
            server.add_metric(values, float(device.server_bytes))
            if device is primary:
                for term in WATCH_TERMS:
                    if term in sample.terms:
                        memory.add_metric([term, *values], float(sample.terms[term]))
        yield from (memory, capacity, headroom, server)
        if sample.engine is not None and sample.engine.kv_usage is not None:
            kv = GaugeMetricFamily(
                "vramctl_kv_cache_usage_ratio", "The engine's KV pool usage (0–1)", labels=["model_name", *extra]
            )
            kv.add_metric([model, *extra.values()], sample.engine.kv_usage)
            yield kv
        alarm = GaugeMetricFamily(
            "vramctl_alarm", "1 while a trend alarm holds, by explain-oom cause label", labels=["cause", *base_names]
        )
        tte = GaugeMetricFamily(
            "vramctl_time_to_exhaustion_seconds",
            "Seconds until free memory runs out at the alarm's rate (+Inf when none)",
            labels=["cause", *base_names],
        )
        rate = GaugeMetricFamily(
            "vramctl_memory_growth_rate_bytes_per_second",
            "Fitted growth rate over the window",
            labels=["series", *base_names],
        )
        pvalues = [str(primary.index), primary.uuid, model, *extra.values()] if primary else ["", "", model, *extra.values()]
        active = {a.cause: a for a in (report.alarms if report else ())}
        for cause in CAUSES:
            hit = active.get(cause)
            alarm.add_metric([cause, *pvalues], 1.0 if hit else 0.0)
            seconds = hit.time_to_exhaustion_s if hit and hit.time_to_exhaustion_s is not None else math.inf
            tte.add_metric([cause, *pvalues], seconds)
        if report is not None:
            rate.add_metric(["transient", *pvalues], report.transient_rate_bytes_per_s)
            rate.add_metric(["other_processes", *pvalues], report.other_rate_bytes_per_s)
        yield from (alarm, tte, rate)


def serve(state: WatchState, host: str, port: int) -> tuple[Any, int]:
    """Start the exporter on host:port in a daemon thread: (server, the bound port)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(state))  # type: ignore[arg-type]
    try:
        result = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise BadInputError(f"--serve {host}:{port}: cannot listen ({exc.strerror or exc})") from None
    httpd = result[0] if isinstance(result, tuple) else result
    return httpd, int(httpd.server_address[1]) if httpd is not None else port
