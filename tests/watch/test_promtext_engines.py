"""The /metrics reader: the Prometheus text format and vLLM / SGLang names by version."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.watch.fakes import EngineState, sglang_body, vllm_body
from vramctl.watch.engines import SGLANG, VLLM, UnknownMetricsError, read_engine
from vramctl.watch.promtext import MetricsFormatError, parse_metrics


def test_vllm_v1_names_and_cache_config_info() -> None:
    state = EngineState(kv_usage=0.5, running=3, waiting=1, preemptions=7)
    m = read_engine(parse_metrics(vllm_body(state)))
    assert m.engine == VLLM and m.names == "vllm:kv_cache_usage_perc"
    assert (m.kv_usage, m.running, m.waiting, m.preemptions_total) == (0.5, 3, 1, 7.0)
    assert (m.block_size, m.num_blocks, m.kv_pool_tokens) == (16, 4096, 65536)
    assert m.kv_pool_bytes is None  # "None" in the label: not stated
    assert m.used_tokens == 32768
    assert m.gpu_memory_utilization == 0.9
    assert dict(m.join_labels) == {"engine": "0", "model_name": "tiny-llama"}
    assert m.start_time_s == state.start_time


def test_vllm_old_gpu_cache_usage_name() -> None:
    m = read_engine(parse_metrics(vllm_body(EngineState(kv_usage=0.75), old_names=True)))
    assert m.names == "vllm:gpu_cache_usage_perc" and m.kv_usage == 0.75


def test_vllm_032_cache_config_states_the_pool_bytes() -> None:
    # the label set vLLM 0.32 (CPU) prints: kv_cache_memory_bytes from VLLM_CPU_KVCACHE_SPACE
    body = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0\n'
        'vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="0",gpu_memory_utilization="0.92",'
        'kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="4194304",num_gpu_blocks="32768"} 1.0\n'
    )
    m = read_engine(parse_metrics(body))
    assert m.kv_pool_bytes == 1 << 30 and m.kv_pool_tokens == 4194304 and m.block_size == 128


def test_sglang_names_sum_over_dp_ranks() -> None:
    body = sglang_body(EngineState(kv_usage=0.4, running=5, waiting=2, preemptions=3))
    body += 'sglang:num_running_reqs{model_name="tiny-llama",tp_rank="0",dp_rank="1"} 4.0\n'
    body += 'sglang:token_usage{model_name="tiny-llama",tp_rank="0",dp_rank="1"} 0.9\n'
    m = read_engine(parse_metrics(body))
    assert m.engine == SGLANG and m.running == 9 and m.waiting == 2
    assert m.kv_usage == 0.9  # the fullest rank
    assert m.kv_pool_tokens == 200000 and m.preemptions_total == 3.0


def test_old_sglang_has_only_the_retracted_gauge() -> None:
    body = 'sglang:token_usage{model_name="m"} 0.97\nsglang:num_running_reqs{model_name="m"} 4\nsglang:num_retracted_reqs{model_name="m"} 2\n'
    m = read_engine(parse_metrics(body))
    assert m.preemptions_total is None and m.retracted_recent == 2.0


@pytest.mark.parametrize(
    "body, words",
    [
        ("<html><body>502 Bad Gateway</body></html>\n", "line 1"),
        ("vllm:kv_cache_usage_perc{engine=\"0\" 0.5\n", "label"),
        ("vllm:kv_cache_usage_perc abc\n", "not a number"),
        ("vllm:kv_cache_usage_perc 0.5 1 2 3\n", "not a metrics line"),
        ("ok 1\n\x00\x01", "binary"),
    ],
)
def test_garbage_is_refused_with_the_line(body: str, words: str) -> None:
    with pytest.raises(MetricsFormatError, match=words):
        parse_metrics(body)


def test_unknown_names_are_refused() -> None:
    with pytest.raises(UnknownMetricsError, match="no vLLM"):
        read_engine(parse_metrics("node_memory_MemTotal_bytes 1e9\nup 1\n"))
    with pytest.raises(UnknownMetricsError, match="does not know"):
        read_engine(parse_metrics('vllm:some_future_name{engine="0"} 1\n'))


def test_special_values_and_escapes() -> None:
    series = parse_metrics('a{x="q\\"uote",y="back\\\\slash"} +Inf 1700000000\nb NaN\n')
    assert series[0].value == math.inf and series[0].label("x") == 'q"uote' and series[0].label("y") == "back\\slash"
    assert math.isnan(series[1].value)


_label_values = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    value=st.floats(allow_nan=False, allow_infinity=False, width=64),
    label_value=_label_values,
)
def test_reads_what_prometheus_client_writes(value: float, label_value: str) -> None:
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    gauge = Gauge("vllm:kv_cache_usage_perc", "usage", ["model_name"], registry=registry)
    gauge.labels(label_value).set(value)
    series = parse_metrics(generate_latest(registry).decode())
    (only,) = [s for s in series if s.name == "vllm:kv_cache_usage_perc"]
    assert only.value == value and only.label("model_name") == label_value
