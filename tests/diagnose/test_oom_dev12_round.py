"""General rules from the dev12 round (issue 9): facts the wording already carries, read as facts.

KV offload layers (LMCache), routers, RL colocation under a sleep-mode allocator, fine-tuning stacks, other engines.
Every text here is synthesised (no thread's text); each rule has a counterpart that must keep its old answer, so that
no rule is simply always on. Every positive test fails on the round's base (9870374). The development logs the rules
came from are scored by scripts/eval_oom.py, not here.
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text

# ---------------------------------------------------------------- a native CUDA check that failed, not with memory


@pytest.mark.parametrize(
    "text",
    [
        "[Bug]: worker dies: Failed: Cuda error /opt/build/csrc/custom_all_reduce.cuh:312 'invalid argument'",
        "INFO loading\nFailed: /src/kernels/allreduce.cu:88 'peer access is not supported between these two devices'",
    ],
)
def test_a_native_cuda_check_with_another_error_is_not_memory(text: str) -> None:
    d = diagnose_text(text)
    assert d.cause == "not-oom"
    assert not any(f.flag == "--gpu-memory-utilization" for f in d.fixes)


def test_a_native_cuda_check_that_ran_out_of_memory_stays_a_memory_failure() -> None:
    d = diagnose_text("Failed: Cuda error /opt/build/csrc/custom_all_reduce.cuh:312 'out of memory'")
    assert d.is_memory_failure
    assert d.cause != "not-oom"


# ---------------------------------------------------------------- a KV cache sized from the settings: needed vs available

KV_FAIL = (
    "engine: KV cache planning failed: Insufficient GPU memory for KV cache allocation.\n"
    "Available: {avail} MB, Required: 65536.00 MB, Reserved: 512.00 MB.\n"
)


def test_kv_needed_over_a_positive_available_is_the_context() -> None:
    d = diagnose_text("serve --max-model-len 131072 --max-num-seqs 4\n" + KV_FAIL.format(avail="16384.00"))
    assert d.cause == "kv-cache-too-small-for-max-model-len"
    assert d.phase == "kv-alloc"
    fix = next(f for f in d.fixes if f.flag == "--max-model-len")
    assert str(fix.value) == "32768"  # 131072 x 16384 / 65536


def test_kv_with_nothing_available_is_no_kv_memory() -> None:
    d = diagnose_text("serve --max-model-len 131072\n" + KV_FAIL.format(avail="-120.00"))
    assert d.cause == "no-kv-cache-memory"


def test_a_kv_failure_line_without_the_numbers_keeps_the_old_answer() -> None:
    d = diagnose_text("engine: KV cache planning failed: Insufficient GPU memory for KV cache allocation.\n")
    assert d.cause == "no-kv-cache-memory"


# ---------------------------------------------------------------- growth without a bound behind a host kill


@pytest.mark.parametrize(
    "text",
    [
        "gateway container is OOMKilled every few hours; its session map is unbounded",
        "Memory cgroup out of memory: Killed process 4242 (router) total-vm:9000000kB\n"
        "the router's memory keeps ramping up under steady traffic",
    ],
)
def test_a_host_kill_with_growth_words_is_a_leak(text: str) -> None:
    d = diagnose_text(text)
    assert d.cause == "memory-leak"


def test_growth_without_a_bound_in_words_is_a_leak() -> None:
    d = diagnose_text("proxy restarts because of OOM: memory usage is unbounded and keeps ramping up")
    assert d.cause == "memory-leak"


@pytest.mark.parametrize(
    "text",
    [
        "The pod was OOMKilled while loading the 70B checkpoint.\nThis is not a memory leak: the node has 64 GB.\n",
        "The pod was OOMKilled while loading the 70B checkpoint.\nIts memory limit is unbounded (no limits set).\n",
    ],
)
def test_a_host_kill_next_to_denied_growth_is_no_leak(text: str) -> None:
    """A denial (`not a memory leak`) or an unbounded limit is no growth: the kill stays the host's OOM killer
    (review of session 9)."""
    d = diagnose_text(text)
    assert d.cause == "host-oom-killer"


def test_a_host_kill_without_growth_words_keeps_the_old_answer() -> None:
    d = diagnose_text("gateway container is OOMKilled while loading the checkpoint shards")
    assert d.cause == "host-oom-killer"


# ---------------------------------------------------------------- a sleep-mode allocator's resume


def test_a_resume_of_the_sleep_allocator_is_a_wake_up() -> None:
    text = (
        "[torch_memory_saver.cpp] cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue)\n"
        "[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp func=resume line=99\n"
    )
    d = diagnose_text(text)
    assert d.cause == "gpu-util-exceeds-free-memory"


def test_the_same_driver_refusal_outside_a_resume_keeps_the_old_answer() -> None:
    text = "[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp func=malloc line=40\n"
    d = diagnose_text(text)
    assert d.cause != "gpu-util-exceeds-free-memory"


# ---------------------------------------------------------------- a card-sized tensor with no engine in the log

HUGE = (
    '  File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl\n'
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 210.00 GiB (GPU 0; 79.15 GiB total capacity; "
    "6.10 GiB already allocated; 71.80 GiB free; 6.20 GiB reserved in total by PyTorch)\n"
)


def test_a_card_sized_request_with_no_engine_is_one_inputs_activations() -> None:
    d = diagnose_text("trainer step 12\n" + HUGE)
    assert d.cause == "activation-spike"


def test_a_card_sized_request_in_an_engines_log_keeps_the_old_answer() -> None:
    engine = "INFO 05-01 10:00:00 [core.py:70] Initializing a V1 LLM engine (v0.9.0) with config: model='m'\n"
    d = diagnose_text(engine + HUGE)
    assert d.cause == "batch-budget-too-large"


# ---------------------------------------------------------------- a shape check next to a cut traceback

CUT = (
    "Capturing batches (avail_mem=0.30 GB):   0%|          | 0/4\n"
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 300, in __init__\n'
    "    self.capture()\n"
)


def test_a_cut_capture_traceback_next_to_a_shape_mismatch_is_not_memory() -> None:
    d = diagnose_text("graph capture breaks with a tensor shape mismatch when dp attention is on\n" + CUT)
    assert d.cause == "not-oom"


def test_a_cut_capture_traceback_alone_keeps_the_old_answer() -> None:
    d = diagnose_text("graph capture breaks when dp attention is on\n" + CUT)
    assert d.cause == "cuda-graph-capture-oom"


# ---------------------------------------------------------------- LMCache's CPU buffer in its YAML keys


def test_an_allocation_failure_with_lmcache_yaml_cpu_buffer_is_that_buffer() -> None:
    text = (
        "config:\n  chunk_size: 256\n  local_cpu: true\n  max_local_cpu_size: 80.0\n"
        "after hours of load every store fails:\n"
        "LMCache WARNING: Failed to allocate memory block of size 4096 on a box with 1 TB host RAM\n"
    )
    d = diagnose_text(text)
    assert d.cause == "host-kv-buffer-exhausted"


def test_the_same_failure_without_lmcache_keeps_the_old_answer() -> None:
    d = diagnose_text(
        "after hours of load every store fails:\nFailed to allocate memory block of size 4096 on 1 TB host RAM\n"
    )
    assert d.cause != "host-kv-buffer-exhausted"


# ---------------------------------------------------------------- adjectives in the generic vocabulary


@pytest.mark.parametrize(
    "text",
    [
        "runner exited: not enough available memory to load the model",
        "the long prefill exhausts unified memory and the worker dies",
        "Error: runner exited, you may not have enough available memory to run this model?",
    ],
)
def test_an_adjective_between_the_words_still_names_a_memory_failure(text: str) -> None:
    d = diagnose_text(text)
    assert d.is_memory_failure


@pytest.mark.parametrize(
    "text",
    [
        "startup done: plenty of available memory left for the KV cache",
        "If you do not have enough GPU memory, lower the utilisation.",
        # a condition before the hypothetical (review of session 9): advice, not an incident
        "Note: if the model is large you may not have enough memory; use more GPUs",
        "If the context is long, the card might not have enough memory for it.",
    ],
)
def test_memory_words_that_report_no_failure_stay_no_failure(text: str) -> None:
    d = diagnose_text(text)
    assert not d.is_memory_failure
