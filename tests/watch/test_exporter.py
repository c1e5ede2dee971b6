"""The Prometheus exporter, scraped on loopback and read by prometheus_client's own parser."""

from __future__ import annotations

import math
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.watch.test_trends import BASE, series
from vramctl.core.errors import BadInputError
from vramctl.core.units import MiB
from vramctl.watch.exporter import WatchState, parse_listen, serve
from vramctl.watch.trends import analyse


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_exporter_series_parse_and_join_labels() -> None:
    samples = series([BASE + i * 10 * MiB for i in range(60)])
    report = analyse(samples)
    state = WatchState({"pod": "vllm-0", "namespace": "serving"})
    server, port = serve(state, "127.0.0.1", 0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        empty = _scrape(port)
        assert empty["vramctl_up"][0][1] == 0.0 and "vramctl_memory_bytes" not in empty
        state.update(samples[-1], report, restarted=True)
        got = _scrape(port)
    finally:
        server.shutdown()
        server.server_close()
    memory = {labels["term"]: value for labels, value in got["vramctl_memory_bytes"]}
    assert set(memory) == {"other_processes", "weights", "kv_cache", "transient", "free"}
    (cap_labels, capacity), = got["vramctl_capacity_bytes"]
    assert sum(memory.values()) == capacity
    assert cap_labels == {"gpu": "0", "UUID": "GPU-0", "model_name": "", "pod": "vllm-0", "namespace": "serving"}
    assert got["vramctl_headroom_bytes"][0][1] == memory["free"]
    alarms = {labels["cause"]: value for labels, value in got["vramctl_alarm"]}
    assert alarms["memory-leak"] == 1.0 and alarms["allocator-fragmentation"] == 0.0
    tte = {labels["cause"]: value for labels, value in got["vramctl_time_to_exhaustion_seconds"]}
    assert 0 < tte["memory-leak"] < math.inf and tte["allocator-fragmentation"] == math.inf
    rates = {labels["series"]: value for labels, value in got["vramctl_memory_growth_rate_bytes_per_second"]}
    assert abs(rates["transient"] - 10 * MiB) < 1
    assert got["vramctl_restarts_total"][0][1] == 1.0
    assert got["vramctl_kv_cache_usage_ratio"][0][1] == 0.4
    for name in got:
        assert ":" not in name and name.startswith("vramctl_")


@pytest.mark.parametrize("text, host, port", [("127.0.0.1:9400", "127.0.0.1", 9400), (":9400", "127.0.0.1", 9400),
                                              ("[::1]:9400", "::1", 9400), ("0.0.0.0:1", "0.0.0.0", 1)])
def test_listen_addresses(text: str, host: str, port: int) -> None:
    assert parse_listen(text) == (host, port)


@pytest.mark.parametrize("text", ["9400", "host:port", "127.0.0.1:70000"])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(BadInputError, match="--serve"):
        parse_listen(text)


def test_a_taken_port_is_bad_input() -> None:
    state = WatchState()
    server, port = serve(state, "127.0.0.1", 0)
    try:
        with pytest.raises(BadInputError, match="cannot listen"):
            serve(state, "127.0.0.1", port)
    finally:
        server.shutdown()
        server.server_close()
