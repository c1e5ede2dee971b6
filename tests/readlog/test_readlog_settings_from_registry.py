"""read-log's `settings_from_report` fills the plan's settings from the flag registry (vramctl/core/engines/flags.py):
every entry read-log reads (`in_logs`) for the log's engine sets its field, with no field listed by hand."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from vramctl.core.engines import flags
from vramctl.diagnose import startup
from vramctl.diagnose.startup import parse_startup_log, settings_from_report

KV = "INFO 11-30 10:01:00 [gpu_worker.py:1] Available KV cache memory: 30.00 GiB"
_STR_VALUES = {"kv_cache_dtype": "fp8_e5m2", "dtype": "float16", "quantization": "fp8"}


def _value(entry: flags.EngineFlag) -> Any:
    return {
        "bool": True,
        "float": 0.75,
        "count": 3,
        "max-model-len": 4096,
        "bytes": 7_000_000_000,
    }.get(entry.kind, _STR_VALUES.get(entry.target))


def _vllm_log(values: dict[str, Any]) -> list[str]:
    body = ", ".join(f"'{k}': {v!r}" for k, v in {"model": "Qwen/Qwen3-8B", **values}.items())
    return [f"INFO 11-30 10:00:00 [utils.py:233] non-default args: {{{body}}}", KV]


def test_every_vllm_registry_setting_round_trips() -> None:
    wanted = {
        e.target: _value(e) for e in flags.entries("vllm") if e.in_logs and e.is_setting and _value(e) is not None
    }
    assert {"tensor_parallel_size", "max_num_seqs", "enable_lora", "kv_cache_memory_bytes"} <= set(wanted)
    s = settings_from_report(parse_startup_log(_vllm_log(wanted)))
    assert {name: getattr(s, name) for name in wanted} == wanted


def test_a_new_registry_entry_is_read_with_no_other_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--max-num-active-seqs` is not read from logs today; marking it `in_logs` in the registry is enough."""
    entry = flags.by_name("--max-num-active-seqs")
    assert not entry.in_logs
    registry = tuple(replace(e, in_logs=True) if e is entry else e for e in flags.REGISTRY)
    monkeypatch.setattr(flags, "REGISTRY", registry)
    monkeypatch.setattr(startup, "_SETTING_KEYS", flags.log_setting_keys())
    s = settings_from_report(parse_startup_log(_vllm_log({"max_num_active_seqs": 48})))
    assert s.max_num_active_seqs == 48


def test_absent_values_keep_the_defaults() -> None:
    s = settings_from_report(parse_startup_log(_vllm_log({"tensor_parallel_size": 0, "max_num_seqs": 64})))
    assert (s.tensor_parallel_size, s.pipeline_parallel_size, s.data_parallel_size) == (1, 1, 1)
    assert (s.dtype, s.kv_cache_dtype, s.enforce_eager, s.enable_chunked_prefill) == ("auto", "auto", False, None)
    assert s.max_num_seqs == 64
