"""vLLM and SGLang `/metrics` names by version, read into one EngineMetrics.

vLLM (`vllm/v1/metrics/loggers.py`, PrometheusStatLogger, v0.10 – v0.32; `vllm/engine/metrics.py` in v0):
- `vllm:kv_cache_usage_perc` (gauge, 0–1) since the V1 rename (vLLM PR #18354, 2025-05); the older
  `vllm:gpu_cache_usage_perc` is read when the new name is absent (V0, and V1 until its removal in PR #29330).
- `vllm:num_requests_running`, `vllm:num_requests_waiting` (gauges), `vllm:num_preemptions_total`
  (counter), `vllm:cache_config_info` (an info gauge whose labels are `CacheConfig.metrics_info()`:
  `block_size`, `num_gpu_blocks`, `cache_dtype`, `gpu_memory_utilization`, and from about v0.11
  `kv_cache_memory_bytes`). V0 adds `vllm:num_requests_swapped` and `vllm:cpu_cache_usage_perc`.

SGLang (`python/sglang/srt/metrics/collector.py`, SchedulerMetricsCollector, v0.4 – v0.5):
- `sglang:token_usage` (gauge, 0–1: used / pool tokens), `sglang:num_used_tokens`,
  `sglang:max_total_num_tokens` (the pool size in tokens; newer versions), `sglang:num_running_reqs`,
  `sglang:num_queue_reqs`, `sglang:num_retracted_reqs` (gauge) and `sglang:num_retracted_requests_total`
  (counter, newer versions).

Both servers also expose prometheus_client's `process_start_time_seconds`: a new value is a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.watch.promtext import Series

VLLM = "vllm"
SGLANG = "sglang"

# Each entry: (canonical field, names in preference order). The first name present wins.
VLLM_NAMES: dict[str, tuple[str, ...]] = {
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "swapped": ("vllm:num_requests_swapped",),
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
}
SGLANG_NAMES: dict[str, tuple[str, ...]] = {
    "kv_usage": ("sglang:token_usage",),
    "running": ("sglang:num_running_reqs",),
    "waiting": ("sglang:num_queue_reqs",),
    "used_tokens": ("sglang:num_used_tokens",),
    "pool_tokens": ("sglang:max_total_num_tokens",),
    "preemptions": ("sglang:num_retracted_requests_total",),
    "retracted_now": ("sglang:num_retracted_reqs",),
}
VLLM_CACHE_INFO = "vllm:cache_config_info"
START_TIME = "process_start_time_seconds"


class UnknownMetricsError(BadInputError):
    """A /metrics body with neither vLLM's nor SGLang's series. Exit 2."""


@dataclass(frozen=True)
class EngineMetrics:
    """One scrape of an engine, in engine-neutral terms. Counts are summed over engines / DP ranks;
    the KV usage is the fullest rank's."""

    engine: str
    names: str
    """Which name set was found, e.g. `vllm:kv_cache_usage_perc` (vLLM ≥ 0.10) or `sglang:token_usage`."""
    kv_usage: float | None
    running: int
    waiting: int
    preemptions_total: float | None
    """vLLM preemptions / SGLang retracted requests since the server started (a counter)."""
    block_size: int | None = None
    num_blocks: int | None = None
    kv_pool_bytes: int | None = None
    """The KV pool's bytes when the engine states them (vLLM `kv_cache_memory_bytes`)."""
    kv_pool_tokens: int | None = None
    used_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    cache_dtype: str | None = None
    model_name: str = ""
    start_time_s: float | None = None
    retracted_recent: float | None = None
    """SGLang's `sglang:num_retracted_reqs` gauge: requests retracted in the last logging interval (older
    versions have no counter)."""
    join_labels: tuple[tuple[str, str], ...] = field(default=())
    """Labels of the engine's own series (`model_name`, `engine`) repeated on vramctl's, for PromQL joins."""

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "names": self.names,
            "kv_usage": self.kv_usage,
            "running": self.running,
            "waiting": self.waiting,
            "preemptions_total": self.preemptions_total,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "kv_pool_bytes": self.kv_pool_bytes,
            "kv_pool_tokens": self.kv_pool_tokens,
            "used_tokens": self.used_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "cache_dtype": self.cache_dtype,
            "model_name": self.model_name,
            "start_time_s": self.start_time_s,
            "retracted_recent": self.retracted_recent,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineMetrics:
        return cls(
            engine=str(data["engine"]),
            names=str(data["names"]),
            kv_usage=_opt_float(data.get("kv_usage")),
            running=int(data["running"]),
            waiting=int(data["waiting"]),
            preemptions_total=_opt_float(data.get("preemptions_total")),
            block_size=_opt_int(data.get("block_size")),
            num_blocks=_opt_int(data.get("num_blocks")),
            kv_pool_bytes=_opt_int(data.get("kv_pool_bytes")),
            kv_pool_tokens=_opt_int(data.get("kv_pool_tokens")),
            used_tokens=_opt_int(data.get("used_tokens")),
            gpu_memory_utilization=_opt_float(data.get("gpu_memory_utilization")),
            cache_dtype=None if data.get("cache_dtype") is None else str(data["cache_dtype"]),
            model_name=str(data.get("model_name", "")),
            start_time_s=_opt_float(data.get("start_time_s")),
            retracted_recent=_opt_float(data.get("retracted_recent")),
        )


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _opt_int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    return value


def _int_label(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def _float_label(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _pick(by_name: dict[str, list[Series]], names: Sequence[str]) -> tuple[str, list[Series]] | None:
    for name in names:
        if by_name.get(name):
            return name, by_name[name]
    return None


def _sum(found: tuple[str, list[Series]] | None) -> float | None:
    return None if found is None else sum(s.value for s in found[1] if s.value == s.value)


def detect_engine(series: Iterable[Series]) -> str | None:
    for s in series:
        if s.name.startswith("vllm:"):
            return VLLM
        if s.name.startswith("sglang:"):
            return SGLANG
    return None


def read_engine(series: Sequence[Series], *, source: str = "/metrics") -> EngineMetrics:
    """Map one scrape onto EngineMetrics; UnknownMetricsError when it is neither engine's."""
    by_name: dict[str, list[Series]] = {}
    for s in series:
        by_name.setdefault(s.name, []).append(s)
    engine = detect_engine(series)
    if engine is None:
        sample = ", ".join(sorted(by_name)[:5]) or "none"
        raise UnknownMetricsError(
            f"{source}: no vLLM (`vllm:…`) or SGLang (`sglang:…`) series among {len(by_name)} names "
            f"(first: {sample}); give the engine's /metrics URL"
        )
    names = VLLM_NAMES if engine == VLLM else SGLANG_NAMES
    kv = _pick(by_name, names["kv_usage"])
    running = _pick(by_name, names["running"])
    if kv is None and running is None:
        wanted = " or ".join(names["kv_usage"] + names["running"])
        raise UnknownMetricsError(
            f"{source}: {engine} series but none of {wanted}: an engine version whose metric names vramctl does not know"
        )
    kv_usage = None if kv is None else max(s.value for s in kv[1])
    first = (kv or running)
    assert first is not None
    join = tuple((k, v) for k, v in first[1][0].labels if k in ("model_name", "engine"))
    model_name = first[1][0].label("model_name")
    start = _pick(by_name, (START_TIME,))
    common: dict[str, Any] = {
        "kv_usage": kv_usage,
        "running": int(_sum(running) or 0),
        "waiting": int(_sum(_pick(by_name, names["waiting"])) or 0),
        "preemptions_total": _sum(_pick(by_name, names["preemptions"])),
        "model_name": model_name,
        "start_time_s": None if start is None else min(s.value for s in start[1]),
        "join_labels": join,
    }
    if engine == VLLM:
        info = by_name.get(VLLM_CACHE_INFO, [])
        block_size = num_blocks = pool_bytes = pool_tokens = None
        util = None
        dtype = None
        if info:
            labels = info[0]
            block_size = _int_label(labels.label("block_size"))
            num_blocks = _int_label(labels.label("num_gpu_blocks"))
            pool_bytes = _int_label(labels.label("kv_cache_memory_bytes"))
            pool_tokens = _int_label(labels.label("kv_cache_size_tokens"))
            util = _float_label(labels.label("gpu_memory_utilization"))
            dtype = labels.label("cache_dtype") or None
            if pool_tokens is None and block_size and num_blocks:
                pool_tokens = block_size * num_blocks
        used = None
        if kv_usage is not None and pool_tokens:
            used = round(kv_usage * pool_tokens)
        return EngineMetrics(
            engine=VLLM,
            names=kv[0] if kv is not None else names["running"][0],
            block_size=block_size,
            num_blocks=num_blocks,
            kv_pool_bytes=pool_bytes,
            kv_pool_tokens=pool_tokens,
            used_tokens=used,
            gpu_memory_utilization=util,
            cache_dtype=dtype,
            **common,
        )
    pool = _sum(_pick(by_name, names["pool_tokens"]))
    used_tokens = _sum(_pick(by_name, names["used_tokens"]))
    return EngineMetrics(
        engine=SGLANG,
        names=kv[0] if kv is not None else names["running"][0],
        kv_pool_tokens=None if pool is None else int(pool),
        used_tokens=None if used_tokens is None else int(used_tokens),
        retracted_recent=_sum(_pick(by_name, names["retracted_now"])),
        **common,
    )

