"""Generalisation round 3 of issue 9: wordings and facts read from the engines' and the kernel's sources.

Every log here is synthesised (own numbers, the message formats of the cited sources); none is copied from a thread.
Each test states the memory-model reason the answer must hold, so that it keeps holding for logs nobody has seen.
"""

from __future__ import annotations

from vramctl.diagnose import Diagnosis, diagnose_text
from vramctl.diagnose.fixvalues import is_numeric_value


def _numeric(d: Diagnosis) -> list[tuple[str | None, float]]:
    """(flag, value) of the fixes with a number (the values are the pasteable strings `--json` prints as numbers)."""
    return [(f.flag, float(f.value)) for f in d.fixes if f.flag and is_numeric_value(f.value)]


def test_a_kernel_oom_report_without_its_killed_line_is_a_host_kill_not_no_failure() -> None:
    # mm/oom_kill.c dump_tasks prints this table only inside an OOM report: the killer ran, the paste lost the kill line
    log = "\n".join(
        [
            "[ 812.331201] Free swap  = 0kB",
            "[ 812.331202] Total swap = 2097148kB",
            "[ 812.331203] 8388608 pages RAM",
            "[ 812.331204] Tasks state (memory values in pages):",
            "[ 812.331205] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
            "[ 812.331206] [   4242]     0  4242 31337000  7000000  60000000        0             0 python3",
        ]
    )
    d = diagnose_text(log)
    assert d.cause == "host-oom-killer"
    assert d.signature == "kernel-oom-killer"


def test_a_v0_worker_that_died_with_exit_code_minus_9_is_a_failure() -> None:
    # vllm/executor/multiproc_worker_utils.py: `Worker %s pid %s died, exit code: %s`; -9 is SIGKILL
    log = (
        "INFO 03-02 10:00:00 model_runner.py:1071] Loading model weights took 13.9 GB\n"
        "ERROR 03-02 10:00:31 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 777 died, exit code: -9\n"
        "INFO 03-02 10:00:31 multiproc_worker_utils.py:124] Killing local vLLM worker processes\n"
    )
    d = diagnose_text(log)
    assert d.cause == "host-oom-killer"
    assert d.cause != "no-failure"


def test_a_host_kill_after_the_weights_gets_a_swap_space_number() -> None:
    # V0 pins swap_space GiB of host RAM per worker for the CPU KV cache right after profiling
    log = (
        "INFO 03-02 10:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='m'\n"
        "INFO 03-02 10:00:40 model_runner.py:1071] Loading model weights took 13.9 GB\n"
        "Killed\n"
    )
    d = diagnose_text(log)
    assert d.cause == "host-oom-killer"
    assert ("--swap-space", 2) in _numeric(d)
    with_setting = diagnose_text("vllm serve m --swap-space 16\n" + log)
    assert ("--swap-space", 8) in _numeric(with_setting)


def test_llamacpp_compute_buffers_after_the_kv_cache_are_the_batch_not_the_kv() -> None:
    # llama.cpp reserves its compute (graph) buffers after the weights and the KV cache (ggml-alloc.c
    # ggml_gallocr_reserve_n); the KV lines above reported sizes, so the KV fitted
    log = "\n".join(
        [
            "llama_new_context_with_model: n_ctx      = 32768",
            "llama_new_context_with_model: n_ubatch   = 1024",
            "llama_kv_cache_init:      CUDA0 KV buffer size =  4096.00 MiB",
            "llama_new_context_with_model: KV self size  = 4096.00 MiB, K (f16): 2048.00 MiB, V (f16): 2048.00 MiB",
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9216.00 MiB on device 0: cudaMalloc failed: "
            "out of memory",
            "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 9663676416",
            "llama_new_context_with_model: failed to allocate compute buffers",
        ]
    )
    d = diagnose_text(log)
    assert (d.cause, d.phase) == ("batch-budget-too-large", "profiling")
    assert d.confidence != "high"
    assert ("--ubatch-size", 512) in _numeric(d)


def test_llamacpp_kv_cache_failure_stays_the_kv() -> None:
    log = "\n".join(
        [
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: cudaMalloc failed: "
            "out of memory",
            "llama_kv_cache_init: failed to allocate buffer for kv cache",
            "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache",
        ]
    )
    assert diagnose_text(log).cause == "no-kv-cache-memory"


def test_a_traceback_cut_in_sglangs_kv_slot_allocation_is_the_runtime_pool() -> None:
    # python/sglang/srt/mem_cache/common.py: the scheduler's slot allocation raises only when the token pool is empty
    log = "\n".join(
        [
            "[2026-01-01 10:00:00 TP0] Prefill batch, #new-seq: 12, #new-token: 30000, token usage: 0.97, #queue-req: 40",
            "[2026-01-01 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/opt/sglang/srt/managers/scheduler.py", line 2100, in get_new_batch_prefill',
            "    new_batch.prepare_for_extend()",
            '  File "/opt/sglang/srt/managers/schedule_batch.py", line 1400, in prepare_for_extend',
            "    out_cache_loc, req_pool_indices_tensor, _ = alloc_for_extend(self)",
            '  File "/opt/sglang/srt/mem_cache/common.py", line 480, in alloc_for_extend',
            "    out_cache_loc = alloc_token_slots(batch.tree_cache, extend_num_tokens)",
            '  File "/opt/sglang/srt/mem_cache/common.py", line 300, in alloc_token_slots',
        ]
    )
    d = diagnose_text(log)
    assert (d.cause, d.phase, d.confidence) == ("kv-pool-exhausted-runtime", "serving", "low")


def test_turbomind_model_instance_oom_is_the_kv_share_with_a_number() -> None:
    # lmdeploy/turbomind/turbomind.py `_create_model_instance`: the batch engine's block manager takes
    # cache_max_entry_count of the free memory for KV blocks, then the instance's buffers must still fit
    log = "\n".join(
        [
            "backend_config=TurbomindEngineConfig(tp=1, session_len=8192, cache_max_entry_count=0.6)",
            "Exception in thread Thread-3:",
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.10/site-packages/lmdeploy/turbomind/turbomind.py", line 480, in '
            "_create_model_instance",
            "    model_inst = self.tm_model.model_comm.create_model_instance(",
            "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/allocator.h:231",
        ]
    )
    d = diagnose_text(log)
    assert (d.cause, d.phase, d.engine) == ("kv-pool-overcommit", "kv-alloc", "lmdeploy")
    assert ("--cache-max-entry-count", 0.3) in _numeric(d)


def test_turbomind_weight_creation_oom_is_the_weights() -> None:
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3.10/site-packages/lmdeploy/turbomind/turbomind.py", line 199, in '
            "_create_weight_func",
            "    model_comm.create_shared_weights(device_id, rank)",
            "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory /lmdeploy/src/turbomind/utils/memory_utils.cu:32",
        ]
    )
    d = diagnose_text(log)
    assert (d.cause, d.phase) == ("weights-do-not-fit", "weights-load")


def test_profiling_assert_with_free_memory_that_did_not_move_is_not_a_memory_failure() -> None:
    # vLLM's own profiling allocates hundreds of MiB at least: free memory that stayed put means the device's
    # counter never saw vLLM's allocations (a platform plugin), not another process giving memory back
    d = diagnose_text(
        "AssertionError: Error in memory profiling. Initial free memory 40000000000, current free memory "
        "40000131072. This happens when the GPU memory was not properly cleaned up before initializing the vLLM "
        "instance."
    )
    assert d.cause == "not-oom"
    assert d.fixes and "free-memory counter" in d.fixes[0].action
    # GiBs given back by another process while vLLM profiled: the start-up budget's reading stands
    d = diagnose_text(
        "AssertionError: Error in memory profiling. Initial free memory 40000000000, current free memory "
        "44000000000. This happens when other processes sharing the same container release GPU memory while vLLM "
        "is profiling during initialization."
    )
    assert d.cause == "gpu-util-exceeds-free-memory"


def test_sglangs_scheduler_wording_shortened_to_a_title_is_still_the_runtime_pool() -> None:
    # only SGLang's scheduler says `Prefill out of memory` / `Decode out of memory`; a title keeps just those words
    log = "\n".join(
        [
            "Decode out of memory with a long context",
            "[2026-02-02 08:00:00] Decode batch, #running-req: 40, #token: 990000, token usage: 0.99, #queue-req: 12",
        ]
    )
    d = diagnose_text(log)
    assert (d.cause, d.phase) == ("kv-pool-exhausted-runtime", "serving")


def test_rays_kill_message_cut_before_its_numbers_is_a_host_kill() -> None:
    # src/ray/raylet/node_manager.cc: the kill message starts `Memory on the node (IP: …) where the task … was running`
    log = (
        "PID\tMEM(GB)\tCOMMAND\n"
        "Memory on the node (IP: 10.1.2.3, ID: 0f0f0f) where the task (task ID: abcd, name=preprocess) was running"
    )
    d = diagnose_text(log)
    assert d.cause == "host-oom-killer"
    full = diagnose_text(
        "Memory on the node (IP: 10.1.2.3, ID: 0f0f0f) where the task (actor ID: ab, name=Worker.__init__, pid=9, "
        "memory used=3.10GB) was running was 61.20GB / 64.00GB (0.95625), which exceeds the memory usage threshold "
        "of 0.95. Ray killed this worker (ID: cd) because it was the most recently scheduled task"
    )
    assert full.cause == "host-oom-killer"
    assert full.facts.get("host_total_bytes") == 64_000_000_000


def test_the_startup_check_without_its_numbers_is_still_the_startup_check() -> None:
    # vllm/v1/worker/gpu_worker.py init_device: the sentence alone (a title, a wrapper's summary) decides the cause
    d = diagnose_text(
        "RolloutWorker error: Free memory on device on startup is less than desired GPU memory utilization (0.85)"
    )
    assert (d.cause, d.phase) == ("gpu-util-exceeds-free-memory", "startup-check")
    assert d.facts.get("gpu_memory_utilization") == 0.85
    assert ("--gpu-memory-utilization", 0.75) in _numeric(d)


def test_frames_pasted_without_the_traceback_header_are_not_no_failure() -> None:
    # a paste that starts below `Traceback (most recent call last):`; vLLM 0.2-0.3 LLMEngine._init_cache asks the
    # workers to `init_cache_engine` (the KV cache allocation) and the paste ends there
    log = "\n".join(
        [
            "all my runs stop with this:",
            '  File "/opt/py/site-packages/vllm/engine/llm_engine.py", line 120, in __init__',
            "    self._init_cache()",
            '  File "/opt/py/site-packages/vllm/engine/llm_engine.py", line 350, in _init_cache',
            '    self._run_workers("init_cache_engine", cache_config=self.cache_config)',
            '  File "/opt/py/site-packages/vllm/engine/llm_engine.py", line 1000, in _run_workers',
        ]
    )
    d = diagnose_text(log)
    assert d.cause != "no-failure"
    assert (d.cause, d.phase, d.confidence) == ("kv-pool-overcommit", "kv-alloc", "low")


def test_a_layer_constructor_in_the_engines_model_code_is_weight_creation() -> None:
    # a layer's __init__ under vllm/model_executor/layers runs only while the model is built: its parameters are
    # allocated there, whatever other process holds the rest of the card
    log = "\n".join(
        [
            '  File "/usr/lib/python3/site-packages/vllm/model_executor/layers/linear.py", line 300, in __init__',
            "    torch.empty(self.output_size, self.input_size, dtype=params_dtype),",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total capacity of "
            "39.38 GiB of which 120.00 MiB is free. Including non-PyTorch memory, this process has 39.25 GiB memory in "
            "use. Of the allocated memory 38.80 GiB is allocated by PyTorch, and 10.00 MiB is reserved by PyTorch but "
            "unallocated.",
        ]
    )
    d = diagnose_text(log)
    assert (d.cause, d.phase, d.confidence) == ("weights-do-not-fit", "weights-load", "high")
    # the same constructor name outside the engine's model code places nothing: only the numbers speak, as a guess
    other = diagnose_text(log.replace("vllm/model_executor/layers/linear.py", "myapp/cache.py"))
    assert other.confidence == "low"


def test_a_kill_told_in_a_persons_words_is_a_host_kill_and_advice_is_not() -> None:
    d = diagnose_text("The pod gets killed by Kubernetes when memory crosses the limit while the model loads.")
    assert d.cause == "host-oom-killer"
    advice = diagnose_text("If the pod is killed when memory exceeds its limit, raise the limit.")
    assert advice.cause == "no-failure"


def test_no_failure_is_sure_only_when_the_log_shows_the_engine_serving() -> None:
    # calibration: a log that ends before serving may end before its failure; a fragment says nothing of the run
    served = diagnose_text(
        "INFO 01-01 10:00:00 [gpu_worker.py:100] Available KV cache memory: 30.00 GiB\n"
        "INFO 01-01 10:00:20 [api_server.py:100] Starting vLLM API server on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"
    )
    assert (served.cause, served.confidence) == ("no-failure", "high")
    stopped = diagnose_text("INFO 01-01 10:00:00 [gpu_model_runner.py:100] Starting to load model m...\n")
    assert (stopped.cause, stopped.confidence) == ("no-failure", "medium")
    fragment = diagnose_text("we restarted it twice and now it is fine\n")
    assert (fragment.cause, fragment.confidence) == ("no-failure", "low")


def test_sglangs_runtime_pool_gets_a_number_from_the_batch_line_or_the_default() -> None:
    # the batch line shows how many requests ran when the pool ran out: cap below that; nothing printed: plan for more
    # decode growth (SGLang's schedule_conservativeness, default 1.0)
    log = "\n".join(
        [
            "[2026-01-01 10:00:00 TP0] Decode batch, #running-req: 48, #token: 150000, token usage: 0.99, #queue-req: 9",
            "[2026-01-01 10:00:01 TP0] Decode out of memory. Try to lower your batch size.",
        ]
    )
    d = diagnose_text(log)
    assert d.cause == "kv-pool-exhausted-runtime"
    assert ("--max-running-requests", 24) in _numeric(d)
    bare = diagnose_text("Prefill out of memory in a long run")
    assert bare.cause == "kv-pool-exhausted-runtime"
    assert _numeric(bare)


def test_a_kv_cache_sized_for_the_context_that_does_not_fit_is_no_kv_memory() -> None:
    # ExLlamaV2 (exllamav2/cache.py create_state_tensors) sizes its cache for max_seq_len after the model is loaded:
    # failing there leaves no room for that context beside the weights (not an over-committed budget)
    log = "\n".join(
        [
            " -- Loading model...",
            "Traceback (most recent call last):",
            '  File "/srv/exllamav2/exllamav2/cache.py", line 250, in __init__',
            "    self.create_state_tensors(copy_from, lazy)",
            '  File "/srv/exllamav2/exllamav2/cache.py", line 90, in create_state_tensors',
            "    p_key_states = torch.zeros(self.shape_wk, dtype = self.dtype, device = device).contiguous()",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB. GPU 0 has a total capacity of "
            "23.65 GiB of which 50.00 MiB is free.",
        ]
    )
    d = diagnose_text(log)
    assert (d.cause, d.phase, d.engine) == ("no-kv-cache-memory", "kv-alloc", "exllamav2")


def test_an_oom_reported_by_the_api_servers_request_handler_is_while_serving() -> None:
    # vLLM V0's API server logs the dead engine loop from its chat handler: the engine was serving a request
    d = diagnose_text(
        "ERROR 05-05 10:00:00 [serving_chat.py:600] MQEngineDeadError: Engine loop is not running. Inspect the "
        "stacktrace to find the original error: OutOfMemoryError('CUDA out of memory. Tried to allocate 256.00 MiB. "
        "GPU 0 has a total capacity of 79.33 GiB of which 20.00 MiB is free. Process 77 has 79.29 GiB memory in use. "
        "Of the allocated memory 70.10 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but "
        "unallocated.')"
    )
    assert d.phase == "serving"
    # cached blocks would have held it, but an engine serving inside its budget cannot tell that from the budget
    assert d.cause != "allocator-fragmentation" or d.confidence != "high"
