"""Shared golden checks of `read-log` against an index.yaml of real start-up logs.

Used by test_readlog_golden.py (../shared/samples/startup) and test_readlog_collected.py
(tests/fixtures/startup_collected). Each index entry records the numbers its log prints, exactly as
printed, under `logged:`. For each key this maps the key to the fact(s) read-log reports and checks that
every number of the value was read from the log: the first number (the headline) is the number read-log
uses for that fact in one of the log's runs, and any alternates ("rank0: 107.35", "other lines 132,560",
or the other items of a list) are among the numbers it read. Keys with a `_tpN` suffix must come from
that rank, `v0_`/`v1_` prefixed keys from a run of that vLLM worker. Keys that are not engine memory
lines are listed in NOT_LOG_LINES with the reason, so a new index key fails until it is mapped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from vramctl.core.ledger import SLACK
from vramctl.core.settings import parse_version
from vramctl.core.units import GiB
from vramctl.diagnose.reader import iter_log_lines
from vramctl.diagnose.startup import Observation, StartupReport, parse_startup_log

# index key (after removing a v0_/v1_ prefix, a _tpN suffix and a _v0_2_N suffix) → the facts its
# numbers map to, in the order they appear in the value. One table for every index: a key means the
# same line wherever it appears.
KEY_FACTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "total_gpu_memory_gib": (("total_memory",),),
    "total_gib": (("total_memory",),),
    "gpu_memory_utilization": (("gpu_memory_utilization",),),
    "usable_gib": (("requested_memory",),),
    "requested_gib": (("requested_memory",),),
    "weights_gib": (("weights", "weights_loaded"),),
    "non_torch_gib": (("non_torch",),),
    "peak_activation_gib": (("activation_peak", "peak_activation_incl_graph"),),
    "available_kv_gib": (("kv_cache",),),
    "available_kv_gib_with_sleep_mode": (("kv_cache",),),
    "weights_loading_took": (("weights_loaded",), ("load_seconds",)),
    "model_loading_gib": (("weights_loaded",),),
    "model_loading_s": (("load_seconds",),),
    "loading_weights_s": (("loading_weights_seconds",),),
    "memory_profiling_takes_s": (("profiling_seconds",),),
    "initial_memory_usage_gib": (("initial_memory_usage",),),
    "peak_torch_memory_gib": (("peak_torch_memory",),),
    "memory_usage_post_profile_gib": (("memory_usage_post_profile",),),
    "num_gpu_blocks": (("num_gpu_blocks",),),
    "num_cpu_blocks": (("num_cpu_blocks",),),
    "gpu_kv_cache_tokens": (("kv_tokens",),),
    "max_concurrency": (("max_concurrency",), ("concurrency_max_model_len",)),
    "cudagraph_gib": (("cuda_graph_actual",),),
    "cuda_graph_gib": (("cuda_graph_actual",),),
    "graph_gib": (("cuda_graph_actual",),),
    "estimated_cuda_graph_gib": (("cuda_graph_estimate",),),
    "util_equivalent_without_cg_profiling": (("gpu_memory_utilization_without_graph_profiling",),),
    "util_suggested_to_keep_kv": (("gpu_memory_utilization_to_keep_kv",),),
    "free_at_startup": (("free_memory_at_start",), ("total_memory",)),
    "free_gib_at_startup": (("free_memory_at_start",),),
    "kv_cache_memory_suggested_bytes": (("kv_cache_memory_to_requested",),),
    "suggested_kv_cache_memory_bytes": (("kv_cache_memory_to_requested",),),
    "suggested_kv_cache_memory_gib": (("kv_cache_memory_to_requested",),),
    "kv_tokens": (("kv_tokens",),),
    "kv_tokens_other_rank": (("kv_tokens",),),
    "consumed_weights_plus_non_torch_gib": (("consumed_memory",),),
    "desired_usage": (("gpu_memory_utilization",), ("requested_memory",)),
    "kv_cache_memory_in_use_bytes": (("kv_cache_in_use",),),
    "kv_cache_memory_to_fit_requested_bytes": (("kv_cache_memory_to_requested",),),
    "kv_cache_memory_to_fill_gpu_bytes": (("kv_cache_memory_to_gpu",),),
    "kv_tokens_capacity_error": (("kv_tokens_capacity",),),
    "attention_block_size_tokens": (("block_size",),),
    "mamba_page_padding_pct": (("mamba_page_padding_pct",),),
    "padding_layers_warning": (("kv_padding_layers",), ("kv_padding_waste_pct",)),
    "encoder_cache_budget_tokens": (("encoder_cache_budget_tokens",),),
    "cuda_graph_profiling": (("cuda_graphs_profiled",), ("cuda_graph_largest_size",)),
    "cuda_graph_profiling_second_mode": (
        ("cuda_graphs_profiled_second_mode",),
        ("cuda_graph_largest_size_second_mode",),
    ),
    "sleep_freed_gib": (("sleep_freed",),),
    "sleep_still_in_use_gib": (("sleep_still_in_use",),),
    # SGLang
    "load_weight_begin_avail_gb": (("load_begin_avail",),),
    "load_weight_end_avail_gb": (("load_end_avail",),),
    "load_weight_mem_usage_gb": (("load_mem_usage",),),
    "load_weight_elapsed_s": (("load_seconds",),),
    "init_dist_mem_usage_gb": (("init_dist_mem_usage",),),
    "init_torch_distributed_mem_usage_gb": (("init_dist_mem_usage",),),
    "k_size_gb": (("k_size",),),
    "v_size_gb": (("v_size",),),
    "memory_pool_end_avail_gb": (("pool_end_avail",),),
    "max_total_num_tokens": (("max_total_num_tokens",),),
    "max_running_requests": (("max_running_requests",),),
    "chunked_prefill_size": (("chunked_prefill_size",),),
    "max_prefill_tokens": (("max_prefill_tokens",),),
    "available_gpu_mem_gb": (("available_gpu_mem",),),
    "context_len": (("context_len",),),
    "cuda_graph_begin_avail_gb": (("graph_begin_avail",),),
    "cuda_graph_mem_usage_gb": (("graph_mem_usage",),),
    "cuda_graph_end_avail_gb": (("graph_end_avail",),),
    "capture_begin_avail_gb": (("graph_begin_avail",),),
    "capture_mem_usage_gb": (("graph_mem_usage",),),
    "capture_end_avail_gb": (("graph_end_avail",),),
    "capture_elapsed_s": (("graph_seconds",),),
    "capture_first_batch_avail_gb": (("graph_capture_avail",),),
    "decode_cuda_graph_begin_avail_gb": (("graph_begin_avail",),),
    "decode_cuda_graph_mem_usage_gb": (("graph_mem_usage",),),
    "decode_cuda_graph_end_avail_gb": (("graph_end_avail",),),
    "cuda_graph_capture_s": (("graph_seconds",),),
}

KEY_SETTINGS: dict[str, str] = {
    "kv_dtype": "kv_cache_dtype",
}
"""Index keys whose value is not a number but a setting the log prints (`dtype: torch.bfloat16`)."""

NOT_LOG_LINES: dict[str, str] = {
    "nvidia_smi_per_process_mib": "an nvidia-smi process table column, not an engine line",
    "cudagraph_gib_llama2_7b": "a Markdown table in the issue prose (the log line itself is tested in test_035)",
    "cudagraph_gib_llama2_70b": "a Markdown table in the issue prose (the log line itself is tested in test_035)",
    "v1_second_instance": "an error message (explain-oom's domain), not a number",
    "cuda_graph_addresses": "SGLang's count of all-reduce buffers registered at capture (`Registering N cuda graph "
    "addresses`), not a size; reading it would put a new first byte (`R`, as in every `Running:` stats line) into the "
    "prefilter",
}

_NUMBER_RE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


def numbers(text: str) -> list[str]:
    return [n.rstrip(",") for n in _NUMBER_RE.findall(text)]


def report(log_dir: Path, log_file: str) -> StartupReport:
    return parse_startup_log(iter_log_lines(log_dir / log_file))


def runs(log_dir: Path, log_file: str) -> list[StartupReport]:
    first = report(log_dir, log_file)
    return [parse_startup_log(iter_log_lines(log_dir / log_file), run=i) for i in range(len(first.runs))]


def _matches(obs: Observation, expected: str, unit: str | None = None) -> bool:
    """`expected` (as printed in the index) is the observation's number.

    `unit` is the index key's unit when it names one (`_gib`, `_gb`): an exact byte count read from the
    log then matches the GiB value the log also prints within that value's rounding.
    """
    from vramctl.diagnose.startup_formats import FACTS, Kind

    kind = FACTS[obs.key].kind
    value = float(expected.replace(",", ""))
    if kind is Kind.SIZE:
        in_bytes = obs.text.endswith("bytes")
        if in_bytes and unit == "GiB":
            decimals = len(expected.split(".", 1)[1]) if "." in expected else 0
            return abs(obs.value - value * GiB) <= 0.5 * 10.0**-decimals * GiB + 1
        scale = 1 if in_bytes else GiB
        return abs(obs.value - value * scale) <= max(1.0, scale * 1e-9)
    return abs(obs.value - value) <= 1e-9


def split_key(key: str) -> tuple[str, str | None, str | None]:
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


def _unit_of(key: str) -> str | None:
    return "GiB" if key.endswith(("_gib", "_gb")) else None


def _norm_setting(value: object) -> str:
    return str(value).strip().lower().removeprefix("torch.")


def check_logged(
    entry: dict[str, Any],
    log_dir: Path,
    *,
    absent_from_excerpt: dict[tuple[str, str], str] | None = None,
) -> None:
    """Every `logged:` number of one index entry is read from its log (see the module docstring)."""
    log_file = entry["log_file"]
    all_runs = runs(log_dir, log_file)
    assert all_runs and all_runs[0].found, f"{log_file}: no start-up memory lines found"
    absent = absent_from_excerpt or {}
    for raw_key, value in entry["logged"].items():
        if raw_key in NOT_LOG_LINES:
            continue
        if (str(entry["id"]), raw_key) in absent:
            raw_text = (log_dir / log_file).read_text(errors="replace").replace(",", "")
            assert str(value).replace(",", "") not in raw_text
            continue
        key, variant, process = split_key(raw_key)
        candidates = [r for r in all_runs if variant is None or r.variant == variant]
        assert candidates, f"{log_file}: no {variant} run for {raw_key}"
        if key in KEY_SETTINGS:
            name = KEY_SETTINGS[key]
            got = [r.settings[name].value for r in candidates if name in r.settings]
            assert _norm_setting(value) in {_norm_setting(g) for g in got}, (
                f"{log_file}: {raw_key} = {value!r} not read as setting {name} (read: {got})"
            )
            continue
        assert key in KEY_FACTS, f"{log_file}: index key {raw_key!r} is not mapped to a fact"
        if isinstance(value, list):
            # Several numbers of one line on different ranks: the first is the headline, the rest alternates.
            text = f"{value[0]} ({', '.join(str(v) for v in value[1:])})"
        else:
            text = str(value)
        main, _, paren = text.partition("(")
        found = numbers(main)
        groups = KEY_FACTS[key]
        unit = _unit_of(key)
        assert len(found) >= 1, f"{log_file}: {raw_key}={value!r} has no number"
        for facts, number in zip(groups, found, strict=False):
            headline_ok = False
            for run in candidates:
                for fact in facts:
                    if process is not None:
                        pool = [o for o in run.observations if o.key == fact and o.process == process]
                    else:
                        chosen = run.facts.get(fact)
                        pool = [chosen] if chosen is not None else []
                    if any(_matches(o, number, unit) for o in pool):
                        headline_ok = True
            all_obs = [o for r in candidates for o in r.all_observations if o.key in facts]
            assert headline_ok or any(_matches(o, number, unit) for o in all_obs), (
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
        every_fact = {fact for facts in groups for fact in facts}
        for alternate in numbers(paren):
            all_obs = [o for r in candidates for o in r.all_observations if o.key in every_fact]
            assert any(_matches(o, alternate, unit) for o in all_obs), (
                f"{log_file}: {raw_key} alternate {alternate} not read ({[o.text for o in all_obs]})"
            )


def check_engine_and_version(entry: dict[str, Any], log_dir: Path) -> None:
    """The engine is the index's; a stated or inferred version agrees with the index's version."""
    rep = report(log_dir, entry["log_file"])
    assert rep.engine == entry["engine"]
    stated = str(entry.get("version") or "")
    m = re.match(r"^(>=)?v?(\d+\.\d+(?:\.\d+)?)", stated)
    if m is None or rep.engine_version is None:
        return
    at_least = m.group(1) is not None
    digits = m.group(2)
    expected = parse_version(digits)
    if rep.version_source == "log":
        got = parse_version(rep.engine_version)
        if at_least:
            assert got >= expected, (entry["log_file"], rep.engine_version, stated)
            return
        n = len(digits.split("."))
        assert got[:n] == expected[:n], f"{entry['log_file']}: read {rep.engine_version}, index says {stated}"
        return
    low = re.search(r">=([\d.]+)", rep.engine_version)
    high = re.search(r"<=([\d.x]+)", rep.engine_version)
    if at_least:
        # The index gives a lower bound only: the inferred range must reach it.
        if high:
            assert parse_version(high.group(1).replace("x", "99")) >= expected, (rep.engine_version, stated)
        return
    if low:
        assert expected >= parse_version(low.group(1)), (rep.engine_version, stated)
    if high:
        assert expected <= parse_version(high.group(1).replace("x", "99")), (rep.engine_version, stated)
    if not low and not high:
        assert parse_version(rep.engine_version) == expected


def check_ledger(entry: dict[str, Any], log_dir: Path) -> None:
    """Every run's ledger sums exactly to its capacity; the slack is the memory outside `requested`."""
    for rep in runs(log_dir, entry["log_file"]):
        if rep.ledger is None:
            assert rep.capacity_bytes is None or rep.kv_cache_bytes is None
            continue
        ledger = rep.ledger
        assert sum(t.bytes for t in ledger.terms) == ledger.capacity_bytes == rep.capacity_bytes
        slack = ledger.get(SLACK)
        assert slack is not None and slack.source.value == "derived"
        # The residual absorbs the logs' rounding: where the log prints the requested memory, the slack
        # is the memory outside it (capacity − requested − other processes − the real graph pool when it
        # is captured after the KV cache) within the summed rounding of the terms.
        if rep.requested_bytes is not None and rep.semantics in ("v0", "v1"):
            outside = ledger.capacity_bytes - rep.requested_bytes
            outside -= ledger.bytes_of("other_processes") + ledger.bytes_of("cuda_graph")
            assert abs(slack.bytes - outside) <= slack.uncertainty_bytes + 1, (
                entry["log_file"],
                slack.bytes / GiB,
                outside / GiB,
                slack.uncertainty_bytes / GiB,
            )


def check_tokens_agree_with_concurrency(entry: dict[str, Any], log_dir: Path) -> None:
    """KV tokens (read, or blocks × block size) ≈ max concurrency × max_model_len, within the printed
    rounding of the concurrency (2 decimals) and one block per sequence (vLLM rounds requests up to blocks)."""
    for rep in runs(log_dir, entry["log_file"]):
        ctx = rep.facts.get("concurrency_max_model_len")
        if rep.engine != "vllm" or rep.kv_tokens is None or rep.max_concurrency is None or ctx is None:
            continue
        if any(o.key in HYBRID_FACTS for o in rep.observations):
            continue  # hybrid KV groups: the token count is per group, concurrency per request over groups
        if (
            rep.facts.get("kv_tokens") is not None
            and rep.facts["kv_tokens"].process != rep.facts["max_concurrency"].process
        ):
            continue
        expected = rep.max_concurrency * ctx.value
        tolerance = 0.005 * ctx.value + 16 * rep.max_concurrency + 1
        assert abs(rep.kv_tokens - expected) <= tolerance, (entry["log_file"], rep.kv_tokens, expected)


HYBRID_FACTS = frozenset({"kv_padding_layers", "mamba_page_padding_pct"})
"""Facts only hybrid KV layouts print (padding layers between groups, a mamba page)."""

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


def index_setting(value: Any) -> float | bool | None:
    if isinstance(value, (bool, int, float)):
        return value
    m = re.match(r"^\s*(\d+(?:\.\d+)?|true|false|True|False)\b", str(value))
    if m is None:
        return None  # "null (131072)", "default" …: not a value the log states
    text = m.group(1)
    return {"true": True, "false": False, "True": True, "False": False}.get(text, float(text))


def check_settings(entry: dict[str, Any], log_dir: Path) -> int:
    """Every setting read-log reads from the log equals the index's setting; returns how many were compared."""
    rep = report(log_dir, entry["log_file"])
    compared = 0
    for key, name in SETTING_KEYS.items():
        expected = index_setting(entry.get(key)) if entry.get(key) is not None else None
        got = rep.settings.get(name)
        if expected is None or got is None:
            continue
        compared += 1
        if isinstance(expected, bool) or isinstance(got.value, bool):
            assert got.value == expected, (entry["log_file"], key, got)
        else:
            assert float(got.value) == float(expected), (entry["log_file"], key, got)
    return compared
