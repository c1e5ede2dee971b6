"""explain-oom beyond the samples: the wordings and rules added to generalise the classifier (each message format is
also a hand-written log in tests/fixtures/oom, checked by test_oom_fixtures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.core.units import GiB, MiB
from vramctl.diagnose import diagnose, diagnose_text, load_catalogue
from vramctl.diagnose.catalogue import CATALOGUE_PATH, CatalogueError

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "oom"

METRICS = (
    "INFO 09-03 10:{m:02d}:{s:02d} [loggers.py:116] Engine 000: Avg prompt throughput: 812.4 tokens/s, "
    "Avg generation throughput: 1530.9 tokens/s, Running: 21 reqs, Waiting: 0 reqs, GPU KV cache usage: 37.5%, "
    "Prefix cache hit rate: 12.0%\n"
)


def _filler(size: int) -> str:
    lines = []
    total = 0
    i = 0
    while total < size:
        line = METRICS.format(m=(i // 60) % 60, s=i % 60)
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)


def _mid_log(tmp_path: Path, middle: str) -> tuple[Path, int]:
    """A log of ~4 MiB: the `middle` line past the fully searched head (2 MiB) and before the tail (256 KiB)."""
    head = _filler(3 << 20)
    line_no = head.count("\n") + 1
    path = tmp_path / "server.log"
    path.write_text(head + middle + "\n" + _filler(1 << 20))
    return path, line_no


def test_oom_bare_killed_in_the_middle_of_a_large_log_is_found(tmp_path: Path) -> None:
    killed = "./run.sh: line 12:  7781 Killed                  vllm serve Qwen/Qwen2.5-72B-Instruct --tensor-parallel-size 4"
    path, line_no = _mid_log(tmp_path, killed)
    d = diagnose(path)
    assert d.cause == "host-oom-killer"
    assert any(e.line == line_no for e in d.evidence)


def test_oom_watchdog_timeout_in_the_middle_of_a_large_log_is_not_oom(tmp_path: Path) -> None:
    watchdog = (
        "[rank2]:[E903 10:41:12.100200300 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=90211, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) "
        "ran for 600031 milliseconds before timing out."
    )
    path, line_no = _mid_log(tmp_path, watchdog)
    d = diagnose(path)
    assert (d.cause, d.phase, d.signature) == ("not-oom", "serving", "nccl-watchdog")
    assert any(e.line == line_no and "Watchdog" in e.text for e in d.evidence)


def test_oom_torch20_fraction_limit_message_over_six_lines() -> None:
    text = (
        "RuntimeError: Allocation on device 1 would exceed allowed memory. (out of memory)\n"
        "Currently allocated     : 30.50 GiB\n"
        "Requested               : 2.25 GiB\n"
        "Device limit            : 31.74 GiB\n"
        "Free (according to CUDA): 19.00 MiB\n"
        "PyTorch limit (set by user-supplied memory fraction)\n"
        "                        : 31.74 GiB\n"
    )
    d = diagnose_text(text)
    assert d.signature == "torch-cuda-oom"
    assert d.facts["requested_bytes"] == round(2.25 * GiB)
    assert d.facts["allocated_bytes"] == round(30.50 * GiB)
    assert d.facts["total_bytes"] == round(31.74 * GiB)
    assert d.facts["free_bytes"] == 19 * MiB


def test_oom_old_parenthesised_torch_layout_parses() -> None:
    d = diagnose_text(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.78 GiB total; "
        "312.00 MiB free)"
    )
    assert d.facts["requested_bytes"] == round(1.5 * GiB)
    assert d.facts["total_bytes"] == round(15.78 * GiB)
    assert d.facts["free_bytes"] == 312 * MiB


def test_oom_card_sized_request_at_start_up_is_the_stack_not_the_model() -> None:
    d = diagnose_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 78.91 GiB (GPU 0; 79.19 GiB total; 0 bytes free)"
    )
    assert (d.cause, d.phase, d.confidence) == ("version-regression", "weights-load", "low")
    assert d.phase_inferred


SAMPLER = (
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 512 dummy requests. Please try "
    "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
)


def test_oom_sampler_phase_is_profiling_before_kv_sizing_and_capture_after() -> None:
    d = diagnose_text(SAMPLER)
    assert (d.cause, d.phase) == ("sampler-warmup-oom", "profiling")
    after = "INFO 05-01 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 120,000 tokens\n" + SAMPLER
    d = diagnose_text(after)
    assert (d.cause, d.phase) == ("sampler-warmup-oom", "graph-capture")
    assert d.fixes[0].flag == "--max-num-seqs" and d.fixes[0].value == "256"


def test_oom_sampler_message_wrapped_over_lines_keeps_its_number() -> None:
    d = diagnose_text(
        SAMPLER.replace("with 512 ", "with 512 \n").replace(
            "`gpu_memory_utilization` ", "`gpu_memory_utilization` \n"
        )
    )
    assert d.signature == "vllm-sampler-warmup"
    assert d.facts["max_num_seqs"] == 512


TRACEBACK_IN_LOAD = (
    "Traceback (most recent call last):\n"
    '  File "/opt/app/vllm/worker/model_runner.py", line 1012, in load_model\n'
    "    self.model = get_model(vllm_config=self.vllm_config)\n"
    '  File "/opt/app/vllm/model_executor/model_loader/loader.py", line 401, in load_weights\n'
    "    param.data.copy_(loaded_weight)\n"
)


def test_oom_traceback_cut_at_the_end_is_read_from_its_frames() -> None:
    d = diagnose_text(TRACEBACK_IN_LOAD)
    assert (d.cause, d.phase, d.confidence) == ("weights-do-not-fit", "weights-load", "low")
    assert d.signature == "traceback-without-exception"


def test_oom_traceback_followed_by_more_log_is_not_read_as_a_cut_one() -> None:
    more = "".join(
        f"INFO 05-01 10:00:{i % 60:02d} [logger.py:39] Received request cmpl-{i}\n" for i in range(80)
    )
    d = diagnose_text(TRACEBACK_IN_LOAD + more)
    assert d.cause == "not-oom"


def test_oom_traceback_with_its_exception_line_uses_the_exception() -> None:
    d = diagnose_text(TRACEBACK_IN_LOAD + "KeyboardInterrupt\n")
    assert (d.cause, d.signature) == ("not-oom", "python-exception")


def test_oom_no_failure_phase_is_where_the_log_ends() -> None:
    weights = "INFO 05-01 10:00:00 [gpu_model_runner.py:2653] Model loading took 14.96 GiB and 6.1 seconds\n"
    kv = "INFO 05-01 10:00:20 [gpu_worker.py:298] Available KV cache memory: 54.35 GiB\n"
    size = "INFO 05-01 10:00:20 [kv_cache_utils.py:1087] GPU KV cache size: 445,232 tokens\n"
    up = "INFO:     Application startup complete.\n"
    assert diagnose_text(weights).phase == "weights-load"
    assert diagnose_text(weights + kv).phase == "profiling"
    assert diagnose_text(weights + kv + size).phase == "kv-alloc"
    d = diagnose_text(weights + kv + size + up)
    assert (d.cause, d.phase) == ("no-failure", "serving")


def test_oom_failure_quoted_above_the_log_takes_its_phase_from_the_lines_below() -> None:
    d = diagnose_text(
        "# issue title: RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n"
        "INFO 06-11 18:22:09 model_runner.py:1008] Loading model weights took 13.0772 GB\n"
    )
    assert (d.cause, d.phase) == ("non-torch-allocation-oom", "profiling")
    assert d.phase_inferred


def test_oom_a_repeated_warning_without_numbers_is_not_a_leak() -> None:
    line = (
        "[2026-03-18 09:14:02,556] LMCache WARNING: No eviction candidates found in local cpu backend. "
        "Local cpu memory is under pressure. Waiting for 0.1 seconds before retrying.\n"
    )
    d = diagnose_text(line * 5)
    assert d.cause == "host-kv-buffer-exhausted"


def test_oom_sglang_slots_out_at_high_token_usage_is_the_pool_not_a_leak() -> None:
    text = (
        (FIXTURES / "sglang_req_slots_low_usage.log")
        .read_text()
        .replace("token usage: 0.02", "token usage: 0.91")
    )
    assert diagnose_text(text).cause == "kv-pool-exhausted-runtime"


def test_oom_sglang_positive_profiled_value_is_only_a_cap() -> None:
    d = diagnose_text(
        "[2025-06-14 03:29:13 TP0] max_total_tokens=262144 is larger than the profiled value 183217. Use the profiled value instead.\n"
    )
    assert d.cause == "no-failure"


def test_oom_trtllm_buffers_while_serving_are_outside_the_budget() -> None:
    text = (
        "[TensorRT-LLM][INFO] Engine 000: Avg prompt throughput ...\n"
        'File "/app/tensorrt_llm/executor/worker.py", line 377, in execute_model\n'
        "[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory "
        "(/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)\n"
    )
    assert diagnose_text(text).cause == "non-torch-allocation-oom"


def test_oom_catalogue_refuses_a_bad_multiline_window(tmp_path: Path) -> None:
    text = CATALOGUE_PATH.read_text().replace("multiline: 6 ", "multiline: 99 ", 1)
    bad = tmp_path / "catalogue.yaml"
    bad.write_text(text)
    with pytest.raises(CatalogueError, match="multiline"):
        load_catalogue(bad)


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("trtllm_runtime_buffers_cudamallocasync.log", "batch-budget-too-large"),
        ("sglang_negative_profiled_tokens.log", "no-kv-cache-memory"),
        ("vllm_v1_capture_end_cuda_error.log", "cuda-graph-capture-oom"),
    ],
)
def test_oom_cli_json_on_the_new_formats(name: str, cause: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain-oom", str(FIXTURES / name), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, None)
    assert out["cause"] == cause
    assert out["fixes"] and out["evidence"]


def test_oom_v1_profiling_assert_with_raw_byte_counts() -> None:
    d = diagnose_text(
        "AssertionError: Error in memory profiling. Initial free memory 80123456512, current free memory "
        "81234567168. This happens when the GPU memory was not properly cleaned up before initializing the vLLM "
        "instance."
    )
    # the catalogue reads the wording as vLLM's sanity check; the source inventory (vllm-memory-profiling-error) as a
    # memory failure of kind `accounting`: another process changed the card's free memory while vLLM profiled
    assert (d.cause, d.signature, d.confidence) == ("gpu-util-exceeds-free-memory", "vllm-profiling-assert", "low")
    assert d.facts["initial_free_bytes"] == 80123456512
    assert "74.62 GiB to 75.66 GiB" in d.fixes[0].reason
