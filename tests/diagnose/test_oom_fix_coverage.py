"""A flag and a number for every memory failure: every cause label x phase x engine family, with and without numbers.

The fixes are assembled as explain-oom assembles them (the label's catalogue fixes computed from the facts, then
`complete_fixes`), over fact records synthesised here: the allocator's numbers present or absent, the engine's settings
present or absent. Each memory-failure diagnosis must carry a fix whose flag is spelled as that engine spells it (the
lists below are written from the engines' own CLIs, independently of the code), whose value pastes (no thousands
separators) and whose reason says where the number came from. The combinations where the log cannot give a number are
listed in `NO_NUMBER` with why; the test fails when a new one appears (and when one of them gets a number: then the
list is shortened).
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vramctl.diagnose import diagnose_text
from vramctl.diagnose.catalogue import LABELS, PHASES, load_catalogue
from vramctl.diagnose.classify import FixAdvice, _apply_fix
from vramctl.diagnose.fixvalues import VALUE_NOTE, complete_fixes, foreign_flag, is_numeric_value, numeric_fix

GiB = 1 << 30
MEMORY_LABELS = tuple(label for label in LABELS if label not in ("not-oom", "no-failure"))
FAIL_PHASES = tuple(p for p in PHASES if p != "context")

# The flags each engine family takes, as its CLI / configuration spells them (vLLM vllm/engine/arg_utils.py, SGLang
# python/sglang/srt/server_args.py, TGI launcher/src/main.rs, trtllm-serve tensorrt_llm/commands/serve.py, LMDeploy
# lmdeploy/cli/utils.py, llama.cpp common/arg.cpp, Ollama envconfig/config.go + api/types.go, ExLlamaV2
# exllamav2/config.py), plus what every deployment takes: environment variables, the container's settings.
COMMON = {"resources.limits.memory", "--shm-size", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES"}
VLLM = {
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--swap-space",
    "--cpu-offload-gb",
    "--kv-offloading-size",
    "--kv-cache-memory-bytes",
    "--max-parallel-loading-workers",
    "--limit-mm-per-prompt",
    "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE",
    "--quantization",
    "--kv-cache-dtype",
    "--dtype",
    "LMCACHE_MAX_LOCAL_CPU_SIZE",  # the host KV tier vLLM runs through its LMCache connector
}
SPELLINGS: dict[str, set[str]] = {
    "vllm": VLLM,
    "sglang": {
        "--mem-fraction-static",
        "--max-running-requests",
        "--chunked-prefill-size",
        "--cuda-graph-max-bs",
        "--context-length",
        "--tp-size",
        "--max-total-tokens",
        "--page-size",
        "--schedule-conservativeness",
        "--hicache-ratio",
        "--cpu-offload-gb",
        "--kv-cache-dtype",
        "--quantization",
        "SGLANG_FLASHINFER_WORKSPACE_SIZE",
        "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK",
    },
    "tgi": {
        "--cuda-memory-fraction",
        "--max-batch-prefill-tokens",
        "--max-total-tokens",
        "--max-input-tokens",
        "--max-concurrent-requests",
        "--num-shard",
        "--quantize",
    },
    "trtllm": {
        "--kv_cache_free_gpu_memory_fraction",
        "--max_batch_size",
        "--max_num_tokens",
        "--max_seq_len",
        "--tp_size",
        "--max_input_len",
    },
    "lmdeploy": {
        "--cache-max-entry-count",
        "--max-batch-size",
        "--max-prefill-token-num",
        "--session-len",
        "--tp",
    },
    "llamacpp": {
        "--n-gpu-layers",
        "--ctx-size",
        "--parallel",
        "--batch-size",
        "--ubatch-size",
        "--tensor-split",
        "--cache-type-k",
    },
    "ollama": {
        "OLLAMA_NUM_PARALLEL",
        "num_ctx",
        "num_batch",
        "OLLAMA_GPU_OVERHEAD",
        "OLLAMA_MAX_LOADED_MODELS",
        "num_gpu",
    },
    "exllamav2": {"max_seq_len", "max_input_len"},
    # runtimes that host vLLM (Ray, LMCache) and logs that name no engine (the kernel's, the kubelet's) take vLLM's
    "ray": VLLM | {"RAY_memory_usage_threshold", "--object-store-memory"},
    "lmcache": VLLM,
    "kubernetes": VLLM,
    "kernel": VLLM,
}
# family -> (the engine explain-oom reports, extra facts that say so)
FAMILIES: dict[str, tuple[str | None, dict[str, Any]]] = {
    "vllm": ("vllm", {}),
    "sglang": ("sglang", {}),
    "tgi": ("tgi", {}),
    "trtllm": ("trtllm", {}),
    "lmdeploy": ("lmdeploy", {}),
    "llamacpp": ("llamacpp", {}),
    "ollama": ("llamacpp", {"ollama": True}),
    "exllamav2": ("exllamav2", {}),
    "ray": ("ray", {}),
    "lmcache": ("lmcache", {}),
    "kubernetes": (None, {}),
    "kernel": (None, {}),
}
# the settings each family's log prints (when it prints them), under the names the catalogue reads them as
SETTINGS: dict[str, dict[str, Any]] = {
    "vllm": {
        "gpu_memory_utilization": 0.9,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
        "max_model_len": 32768,
        "tensor_parallel_size": 1,
        "swap_space": 4,
    },
    "sglang": {
        "mem_fraction_static": 0.88,
        "max_running_requests": 128,
        "chunked_prefill_size": 8192,
        "max_model_len": 32768,
        "tensor_parallel_size": 1,
        "cuda_graph_max_bs": 160,
        "hicache_ratio": 2.0,
    },
    "tgi": {
        "cuda_memory_fraction": 1.0,
        "max_batch_prefill_tokens": 4096,
        "max_total_tokens": 8192,
        "num_shard": 1,
    },
    "trtllm": {
        "free_gpu_memory_fraction": 0.9,
        "max_batch_size": 256,
        "max_num_tokens": 8192,
        "max_seq_len": 8192,
    },
    "lmdeploy": {
        "cache_max_entry_count": 0.8,
        "session_len": 32768,
        "max_prefill_token_num": 8192,
        "tensor_parallel_size": 1,
    },
    "llamacpp": {"ctx_size": 32768, "n_ubatch": 512, "n_parallel": 4, "n_gpu_layers": 99},
    "ollama": {"num_ctx": 8192, "ollama_num_parallel": 4, "n_ubatch": 512},
    "exllamav2": {"max_seq_len": 32768, "max_input_len": 2048},
    "ray": {"gpu_memory_utilization": 0.9, "max_num_seqs": 256, "max_model_len": 32768},
    "lmcache": {"gpu_memory_utilization": 0.9, "max_local_cpu_size": 5.0, "max_model_len": 32768},
    "kubernetes": {"container_memory_limit_bytes": 64 * GiB},
    "kernel": {},
}
# what the allocator / the host printed
NUMBERS: dict[str, Any] = {
    "total_bytes": 80 * GiB,
    "free_bytes": 1 * GiB,
    "requested_bytes": 2 * GiB,
    "allocated_bytes": 74 * GiB,
    "reserved_bytes": 77 * GiB,
    "reserved_unallocated_bytes": 3 * GiB,
    "this_process_bytes": 78 * GiB,
    "kv_tokens": 20000,
    "anon_rss_bytes": 60 * GiB,
    "host_total_bytes": 128 * GiB,
    "host_used_bytes": 124 * GiB,
    "buffer_request_bytes": 600 << 20,
}

# (label, family) pairs that do not concern the engine: no log of it can give a number for them, and why
_HOST_BUFFER = "a vLLM / LMCache / SGLang HiCache host buffer: the engine has no such buffer"
NOT_APPLICABLE: dict[tuple[str, str], str] = {
    **{
        ("host-swap-space-exhausted", f): "vLLM V0's CPU swap space"
        for f in ("sglang", "tgi", "trtllm", "lmdeploy", "llamacpp", "ollama", "exllamav2")
    },
    **{
        (label, f): _HOST_BUFFER
        for label in ("host-kv-buffer-exhausted", "host-pinned-memory-failure")
        for f in ("tgi", "trtllm", "lmdeploy", "llamacpp", "ollama", "exllamav2")
    },
    **{
        ("memory-leak", f): "a leak in the host tier of an engine without one"
        for f in ("tgi", "trtllm", "lmdeploy", "llamacpp", "ollama", "exllamav2")
    },
    **{
        (label, "exllamav2"): "ExLlamaV2 has no parallel or budget setting of its own"
        for label in ("weights-do-not-fit", "memory-leak")
    },
}
# pairs where only the log's host numbers (the kernel's anon-rss, a container limit, Ray's node numbers) or a host
# setting (CPU offload, swap space) give a number: nothing else sizes the host's RAM
NEEDS_HOST_NUMBERS: dict[tuple[str, str], str] = {
    ("host-oom-killer", f): "the host's RAM"
    for f in (
        "vllm",
        "sglang",
        "tgi",
        "trtllm",
        "lmdeploy",
        "llamacpp",
        "ollama",
        "exllamav2",
        "lmcache",
        "kubernetes",
        "kernel",
    )
}

_CAT = load_catalogue()
_WHERE = re.compile(r"\d|default|stated|the log's setting|checked with plan")


def _fixes(label: str, phase: str, family: str, names: dict[str, Any]) -> list[FixAdvice]:
    """The fixes as explain-oom assembles them for a root of `label` (its catalogue fixes, then complete_fixes)."""
    engine, extra = FAMILIES[family]
    names = {**names, **extra, "cause_" + label.replace("-", "_"): True, "engine_known": engine is not None}
    if engine is not None:
        names["engine_" + engine] = True
    out: list[FixAdvice] = []
    for fix in _CAT.causes[label].fixes:
        advice = _apply_fix(fix, names, engine)
        if advice is not None:
            out.append(advice)
    return complete_fixes(
        label, phase, names, engine, out, lambda a, f, v, r: FixAdvice(action=a, flag=f, value=v, reason=r)
    )


def _numeric(fixes: list[FixAdvice]) -> list[FixAdvice]:
    return [f for f in fixes if f.flag and is_numeric_value(f.value)]


def _check(fix: FixAdvice, family: str) -> None:
    assert fix.flag in SPELLINGS[family] | COMMON or fix.flag.startswith(("NCCL_", "CUDA_")), (family, fix)
    engine = FAMILIES[family][0]
    assert not foreign_flag(fix.flag, engine), (family, fix)
    value = str(fix.value)
    assert not re.search(r"\d,\d{3}(?!\d)", value) and " " not in value, fix
    assert _WHERE.search(fix.reason), f"the reason does not say where {value} came from: {fix.reason!r}"


def _missing(family: str, names: dict[str, Any]) -> set[tuple[str, str]]:
    missing = set()
    for label, phase in itertools.product(MEMORY_LABELS, FAIL_PHASES):
        found = _numeric(_fixes(label, phase, family, names))
        if not found:
            missing.add((label, family))
        for fix in found:
            _check(fix, family)
    return missing


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_with_the_logs_numbers_and_settings_every_memory_label_gets_a_number(family: str) -> None:
    missing = _missing(family, {**NUMBERS, **SETTINGS[family]})
    assert missing <= set(NOT_APPLICABLE), (
        f"{family}: no flag with a number for {sorted(missing - set(NOT_APPLICABLE))}"
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("printed", ["settings only", "numbers only", "neither"])
def test_without_numbers_or_settings_the_engines_default_gives_the_number(family: str, printed: str) -> None:
    # a log that prints no settings: the engine's documented default moved by a stated step, or a stated starting value
    names = {"settings only": SETTINGS[family], "numbers only": NUMBERS, "neither": {}}[printed]
    missing = _missing(family, dict(names))
    allowed = set(NOT_APPLICABLE) | set(NEEDS_HOST_NUMBERS)
    assert missing <= allowed, f"{family} ({printed}): no flag with a number for {sorted(missing - allowed)}"
    if printed == "neither":
        for label, phase in itertools.product(MEMORY_LABELS, FAIL_PHASES):
            for fix in _numeric(_fixes(label, phase, family, {})):
                if VALUE_NOTE in fix.reason:
                    assert re.search(r"default|stated", fix.reason), fix


def test_the_exception_lists_have_no_stale_entries() -> None:
    for label, family in NOT_APPLICABLE:
        assert label in MEMORY_LABELS and family in FAMILIES
        assert (label, family) in _missing(family, {**NUMBERS, **SETTINGS[family]}), (label, family)
    for label, family in NEEDS_HOST_NUMBERS:
        assert (label, family) in _missing(family, {}), (
            f"{label} on {family} now gets a number without host numbers"
        )


def test_default_steps_say_what_they_moved_from() -> None:
    # "halve --max-num-seqs from its default 256 to 128"
    flag, value, _, reason = numeric_fix("sampler-warmup-oom", "profiling", {}, "vllm") or ("", "", "", "")
    assert (flag, value) == ("--max-num-seqs", "128") and "256" in reason
    flag, value, _, reason = numeric_fix("kv-pool-overcommit", "kv-alloc", {}, "trtllm") or ("", "", "", "")
    assert (flag, value) == ("--kv_cache_free_gpu_memory_fraction", "0.85") and "0.9" in reason
    flag, value, _, reason = numeric_fix("batch-budget-too-large", "profiling", {}, "trtllm") or (
        "",
        "",
        "",
        "",
    )
    assert (flag, value) == ("--max_num_tokens", "4096") and "8192" in reason
    flag, value, _, _ = numeric_fix(
        "no-kv-cache-memory", "kv-alloc", {"num_ctx": 8192, "ollama": True}, "llamacpp"
    ) or ("", "", "", "")
    assert (flag, value) == ("num_ctx", "4096")
    flag, value, _, _ = numeric_fix("no-kv-cache-memory", "kv-alloc", {"ctx_size": 8192}, "llamacpp") or (
        "",
        "",
        "",
        "",
    )
    assert (flag, value) == ("--ctx-size", "4096")
    flag, value, _, _ = numeric_fix(
        "weights-do-not-fit", "weights-load", {"n_gpu_layers": 33}, "llamacpp"
    ) or ("", "", "", "")
    assert (flag, value) == ("--n-gpu-layers", "16")
    flag, value, _, _ = numeric_fix("weights-do-not-fit", "weights-load", {}, "trtllm") or ("", "", "", "")
    assert (flag, value) == ("--tp_size", "2")


def test_a_step_that_would_not_move_the_setting_is_no_fix() -> None:
    # RAISE the budget: from 0.97 a step to "at most 0.95" would lower it; the next knob (the context) is offered
    flag, value, _, _ = numeric_fix(
        "no-kv-cache-memory", "kv-alloc", {"gpu_memory_utilization": 0.97, "max_model_len": 32768}, "vllm"
    ) or ("", "", "", "")
    assert flag != "--gpu-memory-utilization" or float(value) > 0.97
    # the KV cache holds fewer tokens than the context: the cap is what it holds, never above the setting
    assert numeric_fix(
        "kv-cache-too-small-for-max-model-len",
        "kv-alloc",
        {"kv_tokens": 20000, "max_model_len": 32768},
        "vllm",
    )[:2] == ("--max-model-len", "20000")
    assert numeric_fix(
        "kv-cache-too-small-for-max-model-len",
        "kv-alloc",
        {"kv_tokens": 40000, "max_model_len": 32768},
        "vllm",
    )[:2] == ("--max-model-len", "16384")


def test_host_kills_get_a_limit_from_the_kernels_numbers_on_any_engine() -> None:
    for engine in ("vllm", "sglang", "tgi", "trtllm", "lmdeploy", "llamacpp", None):
        flag, value, _, reason = numeric_fix(
            "host-oom-killer", "serving", {"anon_rss_bytes": 60 * GiB}, engine
        ) or ("", "", "", "")
        assert (flag, value) == ("resources.limits.memory", "90Gi"), engine
        assert "anon-rss" in reason
    flag, value, _, reason = numeric_fix("host-oom-killer", "serving", {"weights_bytes": 15 * GiB}, "sglang") or (
        "",
        "",
        "",
        "",
    )
    assert (flag, value) == ("resources.limits.memory", "30Gi") and "weights" in reason
    flag, value, _, _ = numeric_fix("host-oom-killer", "serving", {"host_total_bytes": 128 * GiB}, "ray") or (
        "",
        "",
        "",
        "",
    )
    assert flag == "--object-store-memory" and int(value) == int(0.15 * 128 * GiB)


# ---- end to end: synthesised log lines (each engine's own message format, numbers of our own), any cause the
# classifier reaches: a memory label carries the engine's flag with a number, a JSON number in --json

_LOGS: dict[str, str] = {
    "vllm-v1-sampler": """INFO 05-01 12:00:00 [api_server.py:1000] vLLM API server version 0.10.1
INFO 05-01 12:00:01 [api_server.py:1001] non-default args: {'model': 'acme/model-8b', 'max_num_seqs': 512}
ERROR 05-01 12:00:30 [core.py:700] EngineCore failed to start.
ERROR 05-01 12:00:30 [core.py:700]   File "/usr/local/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 300, in compile_or_warm_up_model
ERROR 05-01 12:00:30 [core.py:700]     self.model_runner._dummy_sampler_run(
ERROR 05-01 12:00:30 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB. GPU 0 has a total capacity of 23.54 GiB of which 512.00 MiB is free.
""",
    "vllm-v0-no-numbers": """INFO 05-01 12:00:00 llm_engine.py:200] Initializing an LLM engine (v0.6.3) with config: model='acme/model-8b'
INFO 05-01 12:00:10 model_runner.py:1000] Loading model weights took 14.99 GB
torch.OutOfMemoryError: CUDA out of memory.
""",
    "sglang-no-kv": """[2025-05-01 12:00:00] server_args=ServerArgs(model_path='acme/model-8b', mem_fraction_static=0.7, tp_size=1)
[2025-05-01 12:00:20 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=6.10 GB, mem usage=15.00 GB.
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
""",
    "tgi-warmup": """2025-05-01T12:00:00.000000Z  INFO text_generation_launcher: Args { model_id: "acme/model-8b", max_batch_prefill_tokens: 8192, num_shard: Some(1) }
2025-05-01T12:00:30.000000Z ERROR warmup{max_input_length=4095 max_prefill_tokens=8192}: text_generation_router_v3::client: backends/v3/src/client/mod.rs:45: Server error: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.54 GiB of which 1.00 GiB is free.
Error: Backend(Warmup(Generation("CUDA out of memory. Tried to allocate 2.00 GiB")))
""",
    "trtllm-kv": """[TensorRT-LLM][INFO] TensorRT-LLM version: 0.18.0
[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 79.10 GiB, available: 20.00 GiB
[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory (/src/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)
""",
    "lmdeploy-tm": """2025-05-01 12:00:00,000 - lmdeploy - INFO - TurbomindEngineConfig(model_format=None, tp=1, session_len=32768, max_batch_size=128, cache_max_entry_count=0.8)
RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/allocator.h:231
""",
    "llamacpp-weights": """llama_model_load: loaded meta data with 30 key-value pairs
llm_load_tensors: offloading 80 repeating layers to GPU
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 38000.00 MiB on device 0: cudaMalloc failed: out of memory
llama_model_load: error loading model: unable to allocate backend buffer
""",
    "llamacpp-kv": """llama_model_load: loaded meta data with 30 key-value pairs
llm_load_tensors: offloaded 33/33 layers to GPU
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: cudaMalloc failed: out of memory
llama_kv_cache_init: failed to allocate buffer for kv cache
""",
    "ollama-kv": """time=2025-05-01T12:00:00.000Z level=INFO source=routes.go:1200 msg="server config" env="map[OLLAMA_NUM_PARALLEL:4 OLLAMA_MAX_LOADED_MODELS:0]"
time=2025-05-01T12:00:05.000Z level=INFO source=server.go:400 msg="starting llama server" cmd="/usr/lib/ollama/runners/cuda_v12/ollama_llama_server runner --model /root/.ollama/models/blobs/sha256-abc --ctx-size 32768 --batch-size 512 --n-gpu-layers 33 --parallel 4 --port 40000"
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: cudaMalloc failed: out of memory
llama_kv_cache_init: failed to allocate buffer for kv cache
""",
    "ray-monitor": """(raylet) Memory on the node (IP: 10.0.0.1, ID: abc) where the task (actor ID: def, name=RayWorkerWrapper.__init__, pid=1234) was running was 120.50GB / 125.00GB (0.964), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 123) because it was the most recently scheduled task.
(raylet) Workers (tasks / actors) killed due to memory pressure (OOM): 1 Workers killed.
""",
    "kubernetes": """    State:          Terminated
      Reason:       OOMKilled
      Exit Code:    137
    Limits:
      memory:  64Gi
""",
    "kernel": """[12345.678901] Out of memory: Killed process 4242 (python3) total-vm:90000000kB, anon-rss:62914560kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:200000kB oom_score_adj:0
""",
}
_FAMILY_OF = {
    "vllm-v1-sampler": "vllm",
    "vllm-v0-no-numbers": "vllm",
    "sglang-no-kv": "sglang",
    "tgi-warmup": "tgi",
    "trtllm-kv": "trtllm",
    "lmdeploy-tm": "lmdeploy",
    "llamacpp-weights": "llamacpp",
    "llamacpp-kv": "llamacpp",
    "ollama-kv": "ollama",
    "ray-monitor": "ray",
    "kubernetes": "kubernetes",
    "kernel": "kernel",
}


@pytest.mark.parametrize("name", sorted(_LOGS))
def test_a_synthesised_log_of_each_engine_gets_a_pasteable_number(name: str) -> None:
    d = diagnose_text(_LOGS[name])
    assert d.cause in MEMORY_LABELS, (name, d.cause, d.why)
    numeric = _numeric(list(d.fixes))
    assert numeric, (name, d.cause, d.fixes)
    family = _FAMILY_OF[name]
    # Ollama's own names need the log re-read from a file (test_an_ollama_log_gets_ollamas_own_settings); a string
    # is read once, as llama.cpp's
    spellings = SPELLINGS[family] | (SPELLINGS["llamacpp"] if family == "ollama" else set())
    spelled = [f for f in numeric if f.flag in spellings | COMMON]
    assert spelled, (name, numeric)
    for fix in numeric:
        assert _WHERE.search(fix.reason), fix
        assert not re.search(r"\d,\d{3}(?!\d)", str(fix.value))


def test_an_ollama_log_gets_ollamas_own_settings(tmp_path: Path) -> None:
    log = tmp_path / "ollama.log"
    log.write_text(_LOGS["ollama-kv"], encoding="utf-8")
    d = json.loads(
        subprocess.run(
            [sys.executable, "-m", "vramctl", "explain-oom", "--json", str(log)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    )
    numeric = [f for f in d["fixes"] if f["flag"] and isinstance(f["value"], (int, float))]
    assert numeric, d["fixes"]
    assert numeric[0]["flag"] in SPELLINGS["ollama"], numeric
    # the log's own settings, halved (Ollama's num_ctx or OLLAMA_NUM_PARALLEL), not a stated value
    assert "the log's setting" in numeric[0]["reason"], numeric[0]
