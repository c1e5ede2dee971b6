"""Generalisation round 5 of issue 9: rules aimed at transfer, decided by class, not by log.

The misses of three development batches were grouped by the decision that failed, not by the log: a small cache
residue read as fragmentation (the largest class), a failure that only a person's words place (a title, a one-line
report), vLLM V0's serving-loop callback not read as serving, and the CUDA runtime's own out-of-memory error under
WSL. Every log here is synthesised (own numbers, the message formats of the cited sources); none is copied from a
thread. Each test states the memory-model reason the answer must hold, and has a counterpart that must keep the
other answer, so that the rule cannot simply be always on.
"""

from __future__ import annotations

from vramctl.diagnose import diagnose_text
from vramctl.diagnose.decide import FactRecord, decide

GiB = 1 << 30
MiB = 1 << 20


def _torch_oom(requested_mib: float, total_gib: float, free_mib: float, allocated_gib: float, cached_mib: float) -> str:
    # torch 2.x c10/cuda/CUDACachingAllocator.cpp wording (`cached_mib`: reserved by PyTorch but unallocated)
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested_mib:.2f} MiB. GPU 0 has a total "
        f"capacity of {total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Of the allocated memory "
        f"{allocated_gib:.2f} GiB is allocated by PyTorch, and {cached_mib:.2f} MiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )


def _serving(oom: str) -> str:
    # vLLM V1: the engine core was serving (its busy loop is in the traceback) when the request failed
    return "\n".join(
        [
            "INFO 01-02 03:04:05 [api_server.py:1000] Starting vLLM API server on http://0.0.0.0:8000",
            "ERROR 01-02 03:05:06 [core.py:700] EngineCore encountered a fatal error.",
            "ERROR 01-02 03:05:06 [core.py:700] Traceback (most recent call last):",
            'ERROR 01-02 03:05:06 [core.py:700]   File "/x/vllm/v1/engine/core.py", line 690, in run_engine_core',
            "ERROR 01-02 03:05:06 [core.py:700]     engine_core.run_busy_loop()",
            f"ERROR 01-02 03:05:06 [core.py:700] {oom}",
        ]
    )


# ---------------------------------------------------------------- a cache residue is not fragmentation


def test_a_small_cache_residue_on_a_full_card_is_the_budget_not_fragmentation() -> None:
    # PyTorch's caching allocator gives every wholly free cached segment back and retries before it raises, so the
    # "reserved but unallocated" it reports is the free part of partly used segments. 400 MiB of it on a 24 GiB card
    # with 100 MiB free: even perfectly contiguous it could not carry the load, the engine's budget ran out
    d = diagnose_text(_serving(_torch_oom(300, 24.0, 100, 21.5, 400)))
    assert d.cause == "activation-spike"
    assert d.phase == "serving"


def test_a_large_cache_next_to_the_request_is_still_fragmentation() -> None:
    # the counterpart: 2.5 GiB cached but unusable for a 1 GiB request on an 80 GiB card is a layout problem that
    # expandable segments fix (the residue rule must not swallow it)
    d = diagnose_text(_serving(_torch_oom(1024, 80.0, 600, 74.0, 2560)))
    assert d.cause == "allocator-fragmentation"


def test_the_residue_rule_reads_the_card_size_not_a_fixed_amount() -> None:
    # 700 MiB cached: a residue on an 80 GiB card (under 1 GiB and, with the free memory, under a tenth of it), but on
    # a 4 GiB card it is a sixth of the card, which is a real share of the memory to recover
    big = FactRecord(
        phase="serving",
        numbers={
            "requested_bytes": 300 * MiB,
            "total_bytes": 80 * GiB,
            "free_bytes": 50 * MiB,
            "allocated_bytes": 75 * GiB,
            "reserved_unallocated_bytes": 700 * MiB,
        },
        engine="vllm",
    )
    small = FactRecord(
        phase="serving",
        numbers={
            "requested_bytes": 300 * MiB,
            "total_bytes": 4 * GiB,
            "free_bytes": 50 * MiB,
            "allocated_bytes": 3 * GiB,
            "reserved_unallocated_bytes": 700 * MiB,
        },
        engine="vllm",
    )
    assert decide(big).cause == "activation-spike"
    assert decide(small).cause == "allocator-fragmentation"


def test_without_the_cache_numbers_the_residue_rule_does_not_apply() -> None:
    # a message that does not print the free memory cannot show a residue: the cache-versus-request rule still reads
    # what it has (an unknown fact never turns a rule on or off by accident)
    record = FactRecord(
        phase=None,
        numbers={"requested_bytes": 100 * MiB, "reserved_unallocated_bytes": 3 * GiB, "total_bytes": 40 * GiB},
    )
    assert decide(record).cause == "allocator-fragmentation"


# ---------------------------------------------------------------- vLLM V0's serving loop


def test_vllm_v0_background_loop_callback_places_the_failure_in_serving() -> None:
    # vllm/engine/async_llm_engine.py `_log_task_completion` is the done-callback of the engine's background loop,
    # which runs only once the engine serves: a failure it reports is a request's
    log = "\n".join(
        [
            "ERROR 03-04 05:06:07 [async_llm_engine.py:68] " + _torch_oom(200, 24.0, 150, 21.0, 150),
            "Exception in callback _log_task_completion(error_callback=<bound method ...>)",
        ]
    )
    d = diagnose_text(log)
    assert d.phase == "serving"
    assert d.cause == "activation-spike"


# ---------------------------------------------------------------- a person's words place a failure


def test_a_title_saying_the_model_would_not_load_is_the_weights() -> None:
    # no frame, no number: the words say the failure came while the model was being loaded, when the weights are the
    # largest thing the card holds
    d = diagnose_text("[Bug]: Qwen-Next 80B can't load, always OOM error\n")
    assert d.cause == "weights-do-not-fit"
    assert d.phase == "weights-load"
    assert d.confidence == "low"


def test_the_loading_words_do_not_override_a_phase_the_log_gives() -> None:
    # a frame in the engine's serving loop places the failure; words in a title ("failed to load the page") must not
    # move it back to loading
    d = diagnose_text("failed to load the page after the OOM\n" + _serving(_torch_oom(3000, 24.0, 200, 20.0, 100)))
    assert d.phase == "serving"
    assert d.cause == "activation-spike"


def test_a_report_of_models_sharing_one_gpu_is_memory_held_by_others() -> None:
    # several engines started on one card: each finds the memory the others already hold, which is what vLLM's
    # free-memory check at start-up is about
    d = diagnose_text(
        "I run four vLLM models on an 8-GPU node, but all of them are placed on the first GPU.\n"
        "torch.OutOfMemoryError: CUDA out of memory\n"
    )
    assert d.cause == "gpu-util-exceeds-free-memory"


def test_words_naming_the_profiling_run_place_a_numberless_oom_there() -> None:
    d = diagnose_text("vLLM OOM during profiling with a long max-model-len\nCUDA out of memory\n")
    assert d.cause == "batch-budget-too-large"
    assert d.phase == "profiling"
    mm = diagnose_text("Qwen2.5-VL-7B: OOM during profiling\nCUDA out of memory\n")
    assert mm.cause == "multimodal-profiling-oom"


def test_serving_words_place_a_numberless_oom_in_serving() -> None:
    d = diagnose_text("OOM during inference with 64 concurrent requests\ntorch.OutOfMemoryError: CUDA out of memory\n")
    assert d.phase == "serving"


# ---------------------------------------------------------------- the CUDA runtime's own error under WSL


def test_a_runtime_oom_under_wsl_with_no_allocator_numbers_is_pinned_host_memory() -> None:
    # CUDA on WSL limits pinned (page-locked) host memory; a failed cudaHostAlloc surfaces as the runtime's
    # `CUDA error: out of memory` (not the caching allocator's "Tried to allocate ..." message)
    d = diagnose_text("training crashes on WSL2 (Ubuntu 22.04)\nRuntimeError: CUDA error: out of memory\n")
    assert d.cause == "host-pinned-memory-failure"
    assert d.confidence == "low"
    # the counterpart: the same error on a plain Linux host stays a device allocation outside PyTorch
    plain = diagnose_text("training crashes on Ubuntu 22.04\nRuntimeError: CUDA error: out of memory\n")
    assert plain.cause != "host-pinned-memory-failure"


def test_under_wsl_the_allocators_own_message_is_still_gpu_memory() -> None:
    # torch's caching allocator printed its numbers: the device ran out, WSL or not
    d = diagnose_text("running on WSL2\n" + _torch_oom(2048, 8.0, 100, 7.5, 50))
    assert d.cause != "host-pinned-memory-failure"


# ---------------------------------------------------------------- reads as a failure: never "no failure"


def test_chinese_reports_of_running_out_of_gpu_or_host_memory_are_failures() -> None:
    # 显存 is GPU memory (VRAM), 内存 is host memory: "显存不足" (not enough VRAM) is an OOM on the card, "内存不足" on the
    # host; the words around it still place it (加载模型 = loading the model)
    gpu = diagnose_text("加载模型时显存不足\n")
    assert gpu.cause == "weights-do-not-fit"
    assert gpu.phase == "weights-load"
    host = diagnose_text("内存不足，进程被杀\n")
    assert host.cause == "host-oom-killer"
    # the counterpart: a report of high usage that runs fine is no failure
    assert diagnose_text("显存占用很高但正常运行\n").cause == "no-failure"


def test_tgis_launcher_error_alone_is_a_failure_not_no_failure() -> None:
    # launcher/src/main.rs `LauncherError` printed by Rust's main: a shard or the router died (its error is above, or
    # the excerpt cut it): a failure whose cause the excerpt does not show, never "no failure"
    for line in ("Error: ShardCannotStart", "Error: WebserverFailed"):
        d = diagnose_text(line + "\n")
        assert d.cause != "no-failure"
    # the counterpart: the launcher's normal progress is not a failure
    assert diagnose_text("INFO text_generation_launcher: Starting shard rank=0\n").cause == "no-failure"
