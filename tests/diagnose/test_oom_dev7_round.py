"""General rules from the dev7 round (issue 9): each states the memory-model reason it follows.

Every text here is synthesised (no thread's text); each rule has a counterpart that must keep its old answer, so that
no rule is simply always on. The development logs the rules came from are scored by scripts/eval_oom.py, not here.
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text

# ---------------------------------------------------------------- a wrapper's wrapped error decides


@pytest.mark.parametrize(
    "wrapped",
    [
        "RuntimeError: operation not permitted when stream is capturing",
        "AssertionError: expected a bf16 activation for this kernel",
        "libfoo_kernels.so not found",
    ],
)
def test_a_capture_failure_wrapping_another_error_is_not_memory(wrapped: str) -> None:
    # SGLang appends the same list of memory remedies (--mem-fraction-static, --cuda-graph-max-bs) to EVERY capture
    # failure; the wrapped error is what failed. One that names no memory is not a memory failure.
    text = (
        "[2025-01-01 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
        f"Exception: Capture cuda graph failed: {wrapped}\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    )
    d = diagnose_text(text)
    assert d.cause == "not-oom"
    assert d.phase == "graph-capture"


def test_a_capture_failure_wrapping_an_oom_is_still_a_capture_oom() -> None:
    # the counterpart: the same wrapper around an allocation failure is the graph pool not fitting
    text = (
        "[2025-01-01 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total "
        "capacity of 79.10 GiB of which 100.00 MiB is free.\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    )
    d = diagnose_text(text)
    assert d.cause == "cuda-graph-capture-oom"
    assert d.is_memory_failure


def test_a_capture_failure_whose_wrapped_error_was_cut_keeps_the_inventory_guess() -> None:
    # the counterpart: with the wrapped error cut off (an empty `{e}`), nothing names another cause; the source
    # inventory's reading (graph capture runs after the KV pool took its share) stays, as a guess
    text = (
        "[2025-01-01 10:00:00 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
        "Exception: Capture cuda graph failed: \n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    )
    d = diagnose_text(text)
    assert d.cause == "cuda-graph-capture-oom"
    assert d.confidence == "low"


# ---------------------------------------------------------------- the engine's prompt-length checks


@pytest.mark.parametrize(
    ("text", "flag", "value"),
    [
        (
            "WARNING 01-01 10:00:00 scheduler.py:900] Input prompt (9000 tokens) is too long and exceeds limit of 4096",
            "--max-num-batched-tokens",
            "9000",
        ),
        (
            "ValueError: The prompt (total length 12000) is too long to fit into the model (context length 8192). "
            "Make sure that `max_model_len` is no smaller than the number of text tokens.",
            "--max-model-len",
            "12001",
        ),
    ],
)
def test_a_prompt_over_the_engines_limit_is_a_setting_not_memory(text: str, flag: str, value: str) -> None:
    # the engine compares the prompt's length with a limit it was configured with before it asks for any memory:
    # nothing was allocated, so no memory label; the fix is the limit, with the prompt's own length as the number
    d = diagnose_text(text)
    assert d.cause == "not-oom"
    assert not d.is_memory_failure
    assert any(f.flag == flag and f.value == value for f in d.fixes)


def test_a_prompt_larger_than_the_kv_blocks_stays_a_memory_reading() -> None:
    # the counterpart: V0's other refusal names the block manager's capacity (the KV pool), which is memory
    text = (
        "WARNING 01-01 10:00:00 scheduler.py:1003] Input prompt (40000 tokens) is too long and exceeds the capacity "
        "of block_manager"
    )
    assert diagnose_text(text).cause != "not-oom"


# ---------------------------------------------------------------- a paged KV pool's own accounting


def test_a_request_needing_more_pages_than_the_whole_pool_is_a_pool_smaller_than_one_sequence() -> None:
    # the pool is sized once: a request that needs more pages than it holds IN ALL can never be admitted, however many
    # other requests finish; that is the pool being smaller than one sequence, not a busy pool
    text = (
        "[error] Failed to allocate 9 pages from `PagePool`.\n"
        "Required pages: 9, Available pages: 4, Total pages: 4"
    )
    d = diagnose_text(text)
    assert d.cause == "kv-cache-too-small-for-max-model-len"
    assert d.is_memory_failure


def test_a_request_needing_more_pages_than_are_free_is_a_pool_run_out_under_load() -> None:
    # the counterpart: fewer free pages than needed, but the pool could hold it once others finish
    text = (
        "[error] Failed to allocate 9 pages from `PagePool`.\n"
        "Required pages: 9, Available pages: 4, Total pages: 512"
    )
    assert diagnose_text(text).cause == "kv-pool-exhausted-runtime"


# ---------------------------------------------------------------- an offload layer's host buffer


def test_an_offload_layer_that_cannot_store_a_chunk_has_a_full_host_buffer() -> None:
    # LMCache allocates the chunks it stores from its own CPU buffer; when that buffer hands back nothing, the chunk is
    # dropped: the host-side buffer is full (the GPU's KV cache is not involved)
    text = (
        "[2025-01-01 10:00:00,000] LMCache INFO: Storing KV cache for 1000 out of 1000 tokens for request 7\n"
        "[2025-01-01 10:00:00,001] LMCache WARNING: Failed to allocate memory for the KV cache.\n"
        "The KV cache will not be stored. (cache_engine.py:200:lmcache.v1.cache_engine)\n"
    )
    d = diagnose_text(text)
    assert d.cause == "host-kv-buffer-exhausted"
    assert d.phase == "host-tier"


def test_a_gpu_kv_cache_that_cannot_be_allocated_is_not_the_offload_buffer() -> None:
    # the counterpart: the engine's own KV cache (no offload layer) failing to fit is the GPU's budget
    d = diagnose_text(
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"
    )
    assert d.cause == "no-kv-cache-memory"


# ---------------------------------------------------------------- host RAM named in short words


@pytest.mark.parametrize(
    "text",
    [
        "The actor died: the job ran into a RAM OOM when I moved from 2 to 4 GPUs.",
        "Ray actors died: CPU Out of Memory while generating sequences",
        "the node ran out of RAM during the rollout",
    ],
)
def test_host_ram_running_out_is_the_host_not_the_gpu(text: str) -> None:
    # who held the memory: host RAM (the checkpoint read per rank, results and offloaded tensors kept on the host),
    # not the GPU; GPU flags would not help
    d = diagnose_text(text)
    assert d.cause == "host-oom-killer"


def test_vram_running_out_is_not_host_ram() -> None:
    # the counterpart: "VRAM OOM" holds the letters of "RAM OOM" but names the GPU's memory
    d = diagnose_text("Qwen 7B VRAM OOM when loading the model on one 24 GB card")
    assert d.cause != "host-oom-killer"
    assert d.is_memory_failure


def test_a_host_oom_while_reading_the_checkpoint_gets_a_number() -> None:
    # vLLM's ParallelConfig.max_parallel_loading_workers exists "to avoid RAM OOM when using tensor parallel and large
    # models": one rank reads the checkpoint at a time, so host RAM holds one rank's reading
    text = (
        "INFO 05-01 10:00:00 llm_engine.py:70] Initializing an LLM engine with config: model='m', "
        "tensor_parallel_size=4\n"
        "Loading safetensors checkpoint shards:  40% Completed | 2/5\n"
        "Killed\n"
    )
    d = diagnose_text(text)
    assert d.cause == "host-oom-killer"
    assert any(f.flag == "--max-parallel-loading-workers" and f.value == "1" for f in d.fixes)


# ---------------------------------------------------------------- memory that grows from one repetition to the next


@pytest.mark.parametrize(
    "text",
    [
        "The residual GPU memory after sleep appears to grow across steps, and step 4 fails with a CUDA OOM.",
        "GPU memory usage increases after every training step and then OOM",
        "The memory held by the workers grows with each request until the card is full",
    ],
)
def test_memory_that_grows_with_each_repetition_is_a_leak(text: str) -> None:
    # the same work repeated should leave the same memory behind; more after each repetition is memory not given
    # back (low: nobody measured the series)
    d = diagnose_text(text)
    assert d.cause == "memory-leak"
    assert d.confidence == "low"


def test_a_kv_cache_filling_with_requests_is_not_a_leak() -> None:
    # the counterpart: the KV cache filling as requests arrive is the engine working as designed
    assert diagnose_text("KV cache usage grows with each new request, as expected").cause == "no-failure"


# ---------------------------------------------------------------- logprob requests named in words


def test_an_oom_with_logprob_requests_is_the_logprobs_tensor() -> None:
    # a logprob request materialises full-vocabulary fp32 logits for its tokens: a serving-time tensor the start-up
    # profile (which runs without logprobs) never measured, even when the words also mention that warm-up
    text = (
        "[Bug]: CUDA OOM with logprobs\n"
        "The server goes out of memory when many logprobs are requested; the peak measured during warmup did not "
        "include them."
    )
    d = diagnose_text(text)
    assert d.cause == "logprobs-spike"
    assert d.phase == "serving"
    assert d.confidence == "low"


def test_an_oom_during_warmup_without_logprobs_stays_the_warmup_budget() -> None:
    # the counterpart: the same warm-up words with no logprob request keep the profiling reading
    d = diagnose_text("The server goes out of memory during warmup on a 24 GB card.")
    assert d.cause == "batch-budget-too-large"


# ---------------------------------------------------------------- calibration of "no failure"


def test_a_serving_excerpt_under_a_bug_report_title_is_not_sure_of_no_failure() -> None:
    # the serving lines show the engine started; a report titled as a bug comes from a run that failed somewhere, and
    # the excerpt may have left the failure out: "no failure" stands, but not as "high"
    lines = "\n".join(
        f"INFO 01-01 10:00:0{i} metrics.py:396] Avg prompt throughput: 0.0 tokens/s, Running: 4 reqs, "
        f"GPU KV cache usage: 5{i}.0%"
        for i in range(4)
    )
    plain = diagnose_text(lines)
    titled = diagnose_text("[Bug]: the server returns empty answers\n" + lines)
    assert plain.cause == titled.cause == "no-failure"
    assert plain.confidence == "high"
    assert titled.confidence == "medium"


# ---------------------------------------------------------------- a llama.cpp / ollama slot taking a prompt


def test_a_native_allocation_after_a_slot_took_a_prompt_is_serving() -> None:
    # ollama's runner logs `loading cache slot` when a request's prompt is put on a slot: an allocation that fails
    # after it is that prompt's compute buffer, while serving, not the start-up
    oom = (
        "CUDA error: out of memory\n"
        "  current device: 0, in function alloc at ggml/src/ggml-cuda/ggml-cuda.cu:400\n"
        "  cuMemCreate(&handle, reserve_size, &prop, 0)\n"
    )
    slot = (
        'time=2025-01-01T10:00:00Z level=DEBUG source=cache.go:104 msg="loading cache slot" id=0 cache=0 '
        "prompt=50000 used=0 remaining=50000\n"
    )
    served = diagnose_text(slot + oom)
    bare = diagnose_text(oom)
    assert served.phase == "serving"
    assert not served.phase_inferred
    assert bare.phase != "serving"
