"""explain-oom's fix values follow the vLLM release the log names (issue 9: a number in every fix, and the right one).

vLLM's `--gpu-memory-utilization` default is 0.9 through 0.19 (`CacheConfig.gpu_memory_utilization`), 0.92 from 0.20
(`DEFAULT_GPU_MEMORY_UTILIZATION`, `vllm/config/cache.py`) and 1.0 in 0.34 where the extensible KV cache sizes the pool
(`resolved_gpu_memory_utilization`, `vllm/config/cache.py` (0.34.0)) unless `--kv-cache-memory-bytes` is given. A fix
that steps the utilisation from its default when the log does not print it must step from the default of the release
that failed, and say which. Every log text here is synthesised.
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text
from vramctl.diagnose.fixvalues import numeric_fix

# the defaults, written here from vLLM's sources (not read from vramctl)
DEFAULTS = {"0.10.1": 0.9, "0.19.1": 0.9, "0.20.0": 0.92, "0.22.1": 0.92, "0.33.0": 0.92, "0.34.0": 1.0}


@pytest.mark.parametrize("version", sorted(DEFAULTS))
def test_a_lowered_default_starts_from_the_releases_own(version: str) -> None:
    flag, value, _, reason = numeric_fix("gpu-util-exceeds-free-memory", "startup-check", {}, "vllm", version) or (
        "",
        "",
        "",
        "",
    )
    assert flag == "--gpu-memory-utilization"
    assert float(value) == pytest.approx(round(DEFAULTS[version] - 0.1, 2))
    assert f"vLLM {version}'s default" in reason


def test_a_log_without_a_release_takes_the_default_of_the_releases_most_logs_come_from() -> None:
    flag, value, _, reason = numeric_fix("version-regression", "startup-check", {}, "vllm") or ("", "", "", "")
    assert (flag, value) == ("--gpu-memory-utilization", "0.85") and "vLLM's default 0.9" in reason
    # a version string no rule knows is treated the same, not as an error
    assert numeric_fix("version-regression", "startup-check", {}, "vllm", "not-a-version")[:2] == (flag, value)


def test_raising_the_budget_is_offered_only_where_it_rises() -> None:
    # 0.92 + 0.05 is 0.97, capped at 0.95: still a raise
    assert numeric_fix("no-kv-cache-memory", "kv-alloc", {}, "vllm", "0.22.1")[:2] == (
        "--gpu-memory-utilization",
        "0.95",
    )
    # 0.34 already takes the whole card by default: no utilisation raise; the next knob (the context) is offered
    flag, _, _, _ = numeric_fix("no-kv-cache-memory", "kv-alloc", {}, "vllm", "0.34.0") or ("", "", "", "")
    assert flag == "--max-model-len"
    # the log printed 0.97: a default-based row must not "raise" it to 0.95 on any release
    for version in (None, *DEFAULTS):
        flag, value, _, _ = numeric_fix(
            "no-kv-cache-memory", "kv-alloc", {"gpu_memory_utilization": 0.97}, "vllm", version
        ) or ("", "", "", "")
        assert flag != "--gpu-memory-utilization" or float(value) > 0.97, (version, value)


def test_the_explicit_kv_size_turns_the_extensible_cache_off() -> None:
    _, value, _, reason = numeric_fix(
        "kv-pool-overcommit", "kv-alloc", {"kv_cache_memory_bytes": 8 << 30}, "vllm", "0.34.0"
    ) or ("", "", "", "")
    assert value == "0.89" and "0.92" in reason


def test_another_engines_release_does_not_set_vllms_defaults() -> None:
    flag, value, _, _ = numeric_fix("no-kv-cache-memory", "kv-alloc", {}, "sglang", "0.5.3") or ("", "", "", "")
    assert flag == "--mem-fraction-static" and value != ""


CAPTURE_OOM = (
    "(EngineCore_DP0 pid=7) INFO 11-20 09:52:00 [gpu_model_runner.py:3480] Capturing CUDA graphs (mixed prefill-decode,"
    " PIECEWISE):  40%|####      | 27/67\n"
    "(EngineCore_DP0 pid=7) ERROR 11-20 09:52:01 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate 136.00 MiB. GPU 0 has a total capacity of 22.36 GiB of which 120.88 MiB is free. Including non-PyTorch "
    "memory, this process has 22.23 GiB memory in use.\n"
)


@pytest.mark.parametrize(
    ("banner", "version", "value"),
    [
        # the V1 banner: its key phrase overlaps the version's (`LLM engine (v`), which was not read before
        ("(EngineCore_DP0 pid=7) INFO 11-20 09:51:21 [core.py:93] Initializing a V1 LLM engine (v{v}) with config: "
         "model='org/m-8b', tensor_parallel_size=1\n", "0.22.1", "0.89"),
        ("INFO 11-20 09:51:21 llm_engine.py:237] Initializing an LLM engine (v{v}) with config: model='org/m-8b'\n",
         "0.6.3.post1", "0.87"),
        ("INFO 11-20 09:51:20 [api_server.py:1395] vLLM API server version {v}\n", "0.34.0", "0.97"),
    ],
)
def test_the_logged_release_decides_the_default_a_fix_steps_from(banner: str, version: str, value: str) -> None:
    d = diagnose_text(banner.format(v=version) + CAPTURE_OOM)
    assert d.cause == "cuda-graph-capture-oom" and d.engine_version == version
    fix = next(f for f in d.fixes if f.flag == "--gpu-memory-utilization")
    assert fix.value == value and f"vLLM {version}'s default" in fix.reason


def test_without_a_banner_the_fix_says_it_assumed_the_common_default() -> None:
    d = diagnose_text(CAPTURE_OOM)
    fix = next(f for f in d.fixes if f.flag == "--gpu-memory-utilization")
    assert d.engine_version is None and fix.value == "0.87" and "vLLM's default 0.9" in fix.reason


NO_KV = (
    "INFO 11-20 09:12:04 [api_server.py:1043] vLLM API server version {v}\n"
    "INFO 11-20 09:12:04 [cli_args.py:297] non-default args: {{'model': 'org/m-14b', 'max_model_len': 4096{extra}}}\n"
    "ERROR 11-20 09:12:50 [core.py:396] ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine.\n"
)


def test_no_kv_memory_without_numbers_raises_from_the_releases_default() -> None:
    d = diagnose_text(NO_KV.format(v="0.22.1", extra=""))
    assert d.cause == "no-kv-cache-memory"
    fix = next(f for f in d.fixes if f.flag == "--gpu-memory-utilization")
    assert fix.value == "0.95" and "0.22.1's default 0.92" in fix.reason
    # the log's own 0.97: no "raise" to 0.95
    d = diagnose_text(NO_KV.format(v="0.22.1", extra=", 'gpu_memory_utilization': 0.97"))
    assert all(
        f.value is None or float(f.value) > 0.97 for f in d.fixes if f.flag == "--gpu-memory-utilization"
    ), d.fixes


def test_on_a_release_that_takes_the_whole_card_no_raise_of_the_utilisation_is_offered() -> None:
    d = diagnose_text(NO_KV.format(v="0.34.0", extra=""))
    assert d.cause == "no-kv-cache-memory"
    assert not [f for f in d.fixes if f.flag == "--gpu-memory-utilization"], d.fixes
    assert any(f.flag == "--max-model-len" and f.value == "2048" for f in d.fixes), d.fixes
    # a 0.34 log that sets the utilisation below the whole card keeps the raise
    d = diagnose_text(NO_KV.format(v="0.34.0", extra=", 'gpu_memory_utilization': 0.8"))
    assert any(f.flag == "--gpu-memory-utilization" and f.value == "0.85" for f in d.fixes), d.fixes
