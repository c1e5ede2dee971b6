"""Golden tests: every real start-up log in ../shared/samples/startup against its index.yaml `logged:` values.

The index records the numbers each log prints, exactly as printed. For each `logged:` key this test maps
the key to the fact(s) read-log reports and checks that every number of the value was read from the
log: the first number (the headline) is the number read-log uses for that fact in one of the log's
runs, and any alternates in parentheses ("rank0: 107.35", "other lines 132,560") are among the numbers
it read. Keys with a `_tpN` suffix must come from that rank, `v0_`/`v1_` prefixed keys from a run of that
vLLM worker. The few keys that are not engine log lines (an nvidia-smi column, a prose table) are listed
in NOT_LOG_LINES with the reason, so a new index key fails until it is mapped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from vramctl.core.ledger import SLACK
from vramctl.core.settings import parse_version
from vramctl.core.units import GiB
from vramctl.diagnose.reader import iter_log_lines
from vramctl.diagnose.startup import Observation, StartupReport, parse_startup_log

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples" / "startup"
INDEX = yaml.safe_load((SAMPLES / "index.yaml").read_text()) if SAMPLES.is_dir() else {"datapoints": []}
ENTRIES = INDEX["datapoints"]

# index key (after removing a v0_/v1_ prefix, a _tpN suffix and a _v0_2_N suffix) → the facts its
# numbers map to, in the order they appear in the value.
KEY_FACTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "total_gpu_memory_gib": (("total_memory",),),
    "usable_gib": (("requested_memory",),),
    "weights_gib": (("weights", "weights_loaded"),),
    "non_torch_gib": (("non_torch",),),
    "peak_activation_gib": (("activation_peak", "peak_activation_incl_graph"),),
    "available_kv_gib": (("kv_cache",),),
    "available_kv_gib_with_sleep_mode": (("kv_cache",),),
    "weights_loading_took": (("weights_loaded",), ("load_seconds",)),
    "initial_memory_usage_gib": (("initial_memory_usage",),),
    "peak_torch_memory_gib": (("peak_torch_memory",),),
    "memory_usage_post_profile_gib": (("memory_usage_post_profile",),),
    "num_gpu_blocks": (("num_gpu_blocks",),),
    "num_cpu_blocks": (("num_cpu_blocks",),),
    "max_concurrency": (("max_concurrency",), ("concurrency_max_model_len",)),
    "cudagraph_gib": (("cuda_graph_actual",),),
    "free_at_startup": (("free_memory_at_start",), ("total_memory",)),
    "kv_cache_memory_suggested_bytes": (("kv_cache_memory_to_requested",),),
    "kv_tokens": (("kv_tokens",),),
    "kv_tokens_other_rank": (("kv_tokens",),),
    "consumed_weights_plus_non_torch_gib": (("consumed_memory",),),
    "desired_usage": (("gpu_memory_utilization",), ("requested_memory",)),
    "kv_cache_memory_in_use_bytes": (("kv_cache_in_use",),),
    "kv_cache_memory_to_fit_requested_bytes": (("kv_cache_memory_to_requested",),),
    "kv_cache_memory_to_fill_gpu_bytes": (("kv_cache_memory_to_gpu",),),
    "kv_tokens_capacity_error": (("kv_tokens_capacity",),),
    "load_weight_begin_avail_gb": (("load_begin_avail",),),
    "load_weight_end_avail_gb": (("load_end_avail",),),
    "load_weight_mem_usage_gb": (("load_mem_usage",),),
    "init_dist_mem_usage_gb": (("init_dist_mem_usage",),),
    "k_size_gb": (("k_size",),),
    "v_size_gb": (("v_size",),),
    "memory_pool_end_avail_gb": (("pool_end_avail",),),
    "max_total_num_tokens": (("max_total_num_tokens",),),
    "max_running_requests": (("max_running_requests",),),
    "context_len": (("context_len",),),
    "cuda_graph_begin_avail_gb": (("graph_begin_avail",),),
    "cuda_graph_mem_usage_gb": (("graph_mem_usage",),),
    "cuda_graph_end_avail_gb": (("graph_end_avail",),),
    "decode_cuda_graph_begin_avail_gb": (("graph_begin_avail",),),
    "decode_cuda_graph_mem_usage_gb": (("graph_mem_usage",),),
    "decode_cuda_graph_end_avail_gb": (("graph_end_avail",),),
    "cuda_graph_capture_s": (("graph_seconds",),),
}

NOT_LOG_LINES: dict[str, str] = {
    "nvidia_smi_per_process_mib": "an nvidia-smi process table column, not an engine line",
    "cudagraph_gib_llama2_7b": "a Markdown table in the issue prose (the log line itself is tested in test_035)",
    "cudagraph_gib_llama2_70b": "a Markdown table in the issue prose (the log line itself is tested in test_035)",
    "v1_second_instance": "an error message (explain-oom's domain), not a number",
}

ABSENT_FROM_EXCERPT: dict[tuple[str, str], str] = {
    (
        "015",
        "kv_cache_memory_suggested_bytes",
    ): "the index records it but the excerpt in 015.log does not print it",
}
"""Index values that the log excerpt does not contain (checked: the test fails if one appears)."""

_NUMBER_RE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")
_UNIT_SCALE = {"size": GiB, "count": 1, "ratio": 1, "seconds": 1}


def _numbers(text: str) -> list[str]:
    return [n.rstrip(",") for n in _NUMBER_RE.findall(text)]


def _report(log_file: str) -> StartupReport:
    return parse_startup_log(iter_log_lines(SAMPLES / log_file))


def _runs(log_file: str) -> list[StartupReport]:
    first = _report(log_file)
    return [parse_startup_log(iter_log_lines(SAMPLES / log_file), run=i) for i in range(len(first.runs))]


def _matches(obs: Observation, expected: str) -> bool:
    from vramctl.diagnose.startup_formats import FACTS, Kind

    kind = FACTS[obs.key].kind
    value = float(expected.replace(",", ""))
    if kind is Kind.SIZE:
        scale = 1 if obs.text.endswith("bytes") else GiB
        return abs(obs.value - value * scale) <= max(1.0, scale * 1e-9)
    return abs(obs.value - value) <= 1e-9


def _split_key(key: str) -> tuple[str, str | None, str | None]:
    variant = None
    process = None
    m = re.match(r"^(v[01])_(.*)$", key)
    if m:
        variant, key = m.group(1).upper(), m.group(2)
    m = re.match(r"^(.*)_tp(\d+)$", key)
    if m:
        key, process = m.group(1), f"TP{m.group(2)}"
    key = re.sub(r"_v0_2_\d+$", "", key)
    return key, variant, process


def _check_entry(entry: dict[str, Any]) -> None:
    log_file = entry["log_file"]
    runs = _runs(log_file)
    assert runs and runs[0].found, f"{log_file}: no start-up memory lines found"
    for raw_key, value in entry["logged"].items():
        if raw_key in NOT_LOG_LINES:
            continue
        if (str(entry["id"]), raw_key) in ABSENT_FROM_EXCERPT:
            raw_text = (SAMPLES / log_file).read_text(errors="replace").replace(",", "")
            assert str(value).replace(",", "") not in raw_text
            continue
        key, variant, process = _split_key(raw_key)
        assert key in KEY_FACTS, f"{log_file}: index key {raw_key!r} is not mapped to a fact"
        text = str(value)
        main, _, paren = text.partition("(")
        numbers = _numbers(main)
        groups = KEY_FACTS[key]
        assert len(numbers) >= 1, f"{log_file}: {raw_key}={value!r} has no number"
        candidates = [r for r in runs if variant is None or r.variant == variant]
        assert candidates, f"{log_file}: no {variant} run for {raw_key}"
        for facts, number in zip(groups, numbers, strict=False):
            headline_ok = False
            for run in candidates:
                for fact in facts:
                    if process is not None:
                        pool = [o for o in run.observations if o.key == fact and o.process == process]
                    else:
                        chosen = run.facts.get(fact)
                        pool = [chosen] if chosen is not None else []
                    if any(_matches(o, number) for o in pool):
                        headline_ok = True
            all_obs = [o for r in candidates for o in r.all_observations if o.key in facts]
            assert headline_ok or any(_matches(o, number) for o in all_obs), (
                f"{log_file}: {raw_key} = {number} not read (read: {[o.text for o in all_obs]})"
            )
            distinct = {o.value for o in candidates[0].observations if o.key in facts}
            if process is None and len(candidates) == 1 and len(distinct) == 1:
                # One value in the log: it must be the one reported (with several ranks or several
                # values in the prose, the headline only has to be among the values read).
                assert headline_ok, (
                    f"{log_file}: {raw_key} = {number} read but not the reported value "
                    f"({[r.facts.get(f).text for r in candidates for f in facts if r.facts.get(f)]})"
                )
        for alternate in _numbers(paren):
            facts = groups[0]
            all_obs = [o for r in candidates for o in r.all_observations if o.key in facts]
            assert any(_matches(o, alternate) for o in all_obs), (
                f"{log_file}: {raw_key} alternate {alternate} not read ({[o.text for o in all_obs]})"
            )


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['id']}-{e['log_file']}" for e in ENTRIES])
def test_logged_values(entry: dict[str, Any]) -> None:
    _check_entry(entry)


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['id']}-{e['log_file']}" for e in ENTRIES])
def test_engine_and_version(entry: dict[str, Any]) -> None:
    report = _report(entry["log_file"])
    assert report.engine == entry["engine"]
    stated = str(entry.get("version") or "")
    m = re.match(r"^v?(\d+\.\d+(?:\.\d+)?)", stated)
    if m is None or report.engine_version is None:
        return
    expected = parse_version(m.group(1))
    if report.version_source == "log":
        got = parse_version(report.engine_version)
        assert got[: len(m.group(1).split("."))] == expected[: len(m.group(1).split("."))], (
            f"{entry['log_file']}: read {report.engine_version}, index says {stated}"
        )
    else:
        low = re.search(r">=([\d.]+)", report.engine_version)
        high = re.search(r"<=([\d.x]+)", report.engine_version)
        if low:
            assert expected >= parse_version(low.group(1)), (report.engine_version, stated)
        if high:
            assert expected <= parse_version(high.group(1).replace("x", "99")), (
                report.engine_version,
                stated,
            )
        if not low and not high:
            assert parse_version(report.engine_version) == expected


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['id']}-{e['log_file']}" for e in ENTRIES])
def test_ledger_sums_and_rounding(entry: dict[str, Any]) -> None:
    for report in _runs(entry["log_file"]):
        if report.ledger is None:
            assert report.capacity_bytes is None or report.kv_cache_bytes is None
            continue
        ledger = report.ledger
        assert sum(t.bytes for t in ledger.terms) == ledger.capacity_bytes == report.capacity_bytes
        slack = ledger.get(SLACK)
        assert slack is not None and slack.source.value == "derived"
        # The residual absorbs the logs' rounding: where the log prints the requested memory, the slack
        # is the memory outside it (capacity − requested − other processes − the real graph pool when it
        # is captured after the KV cache) within the summed rounding of the terms.
        if report.requested_bytes is not None and report.semantics in ("v0", "v1"):
            outside = ledger.capacity_bytes - report.requested_bytes
            outside -= ledger.bytes_of("other_processes") + ledger.bytes_of("cuda_graph")
            assert abs(slack.bytes - outside) <= slack.uncertainty_bytes + 1, (
                entry["log_file"],
                slack.bytes / GiB,
                outside / GiB,
                slack.uncertainty_bytes / GiB,
            )


def test_035_graph_line() -> None:
    report = _report("035.log")
    assert report.facts["cuda_graph_actual"].text == "6.32 GiB"
    assert report.facts["graph_seconds"].value == 38


def test_every_sample_is_in_the_index() -> None:
    listed = {e["log_file"] for e in ENTRIES}
    on_disk = {p.name for p in SAMPLES.glob("*.log")}
    assert on_disk <= listed


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['id']}-{e['log_file']}" for e in ENTRIES])
def test_tokens_agree_with_concurrency(entry: dict[str, Any]) -> None:
    """KV tokens (read, or blocks × block size) ≈ max concurrency × max_model_len, within the printed
    rounding of the concurrency (2 decimals) and one block per sequence (vLLM rounds requests up to blocks)."""
    for report in _runs(entry["log_file"]):
        ctx = report.facts.get("concurrency_max_model_len")
        if (
            report.engine != "vllm"
            or report.kv_tokens is None
            or report.max_concurrency is None
            or ctx is None
        ):
            continue
        if (
            report.facts.get("kv_tokens") is not None
            and report.facts["kv_tokens"].process != report.facts["max_concurrency"].process
        ):
            continue
        expected = report.max_concurrency * ctx.value
        tolerance = 0.005 * ctx.value + 16 * report.max_concurrency + 1
        assert abs(report.kv_tokens - expected) <= tolerance, (entry["log_file"], report.kv_tokens, expected)


SETTING_KEYS = {
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_model_len": "max_model_len",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "enforce_eager": "enforce_eager",
    "block_size": "block_size",
    "mem_fraction_static": "mem_fraction_static",
    "chunked_prefill_size": "chunked_prefill_size",
}


def _index_setting(value: Any) -> float | bool | None:
    if isinstance(value, (bool, int, float)):
        return value
    m = re.match(r"^\s*(\d+(?:\.\d+)?|true|false|True|False)\b", str(value))
    if m is None:
        return None  # "null (131072)", "default" …: not a value the log states
    text = m.group(1)
    return {"true": True, "false": False, "True": True, "False": False}.get(text, float(text))


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['id']}-{e['log_file']}" for e in ENTRIES])
def test_settings_match_the_index(entry: dict[str, Any]) -> None:
    """Every setting read-log reads from the log equals the index's setting for that run."""
    report = _report(entry["log_file"])
    for key, name in SETTING_KEYS.items():
        expected = _index_setting(entry.get(key)) if entry.get(key) is not None else None
        got = report.settings.get(name)
        if expected is None or got is None:
            continue
        if isinstance(expected, bool) or isinstance(got.value, bool):
            assert got.value == expected, (entry["log_file"], key, got)
        else:
            assert float(got.value) == float(expected), (entry["log_file"], key, got)


def test_settings_are_read_from_most_logs() -> None:
    read = sum(
        1
        for e in ENTRIES
        for key, name in SETTING_KEYS.items()
        if e.get(key) is not None and _report(e["log_file"]).settings.get(name) is not None
    )
    assert read >= 170  # 174 of the index's stated settings are in the log excerpts and read
