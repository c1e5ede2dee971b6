"""General rules from the dev10 round (issue 9): reports from the projects that run vLLM / SGLang for something else.

RL trainers that colocate the rollout engine with training, evaluation harnesses, offload layers, container
platforms. Every text here is synthesised (no thread's text); each rule has a counterpart that must keep its old
answer, so that no rule is simply always on. The development logs the rules came from are scored by
scripts/eval_oom.py, not here.
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text

# ---------------------------------------------------------------- a rollout engine colocated with its trainer


@pytest.mark.parametrize(
    "text",
    [
        # verl / EasyR1 spell the engine's share inside the trainer's config
        "PPO run dies with OOM on 4x A100 40G when actor_rollout_ref.rollout.gpu_memory_utilization=0.75",
        # TRL / OpenRLHF / ms-swift spell it with the engine's name in front
        "GRPO training: OOM at step 5, my config has vllm_gpu_memory_utilization=0.8 and use_vllm=True",
        "train_ppo_ray with --colocate_all_models --vllm_enable_sleep runs out of memory after two episodes",
    ],
)
def test_a_failure_nothing_places_in_a_colocated_trainer_is_the_shared_card(text: str) -> None:
    # the engine's budget is a share of the whole card; the trainer's weights, optimizer and activations hold the rest
    d = diagnose_text(text)
    assert d.is_memory_failure
    assert d.cause == "gpu-util-exceeds-free-memory"
    assert d.confidence == "low"


def test_the_fix_names_the_trainers_own_key_with_a_number() -> None:
    d = diagnose_text(
        "GRPO training: OOM at step 5, my config has vllm_gpu_memory_utilization=0.8 and use_vllm=True"
    )
    fix = next(f for f in d.fixes if f.flag == "vllm_gpu_memory_utilization")
    assert fix.value == "0.7"  # a tenth of the card back to the trainer
    verl = diagnose_text(
        "PPO run dies with OOM on 4x A100 40G, actor_rollout_ref.rollout.gpu_memory_utilization=0.75"
    )
    fix = next(f for f in verl.fixes if f.flag == "actor_rollout_ref.rollout.gpu_memory_utilization")
    assert fix.value == "0.65"


@pytest.mark.parametrize(
    "text",
    [
        # the same words without a trainer: the old fallback
        "the server dies with OOM on 4x A100 40G, --gpu-memory-utilization 0.75",
        # a trainer, but the words place it at loading: the weights rule keeps it
        "OOM when loading the model, actor_rollout_ref.rollout.gpu_memory_utilization=0.75",
    ],
)
def test_without_a_colocated_trainer_or_with_a_phase_the_rule_stands_down(text: str) -> None:
    d = diagnose_text(text)
    assert d.is_memory_failure
    assert d.cause != "gpu-util-exceeds-free-memory"


def test_a_colocated_trainer_does_not_override_the_allocators_numbers() -> None:
    text = "\n".join(
        [
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 90.00 GiB. GPU 0 has a total capacity of "
            "79.15 GiB of which 60.00 GiB is free. Including non-PyTorch memory, this process has 19.00 GiB memory in "
            "use. Of the allocated memory 18.00 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but "
            "unallocated.",
        ]
    )
    assert diagnose_text(text).cause != "gpu-util-exceeds-free-memory"


# ---------------------------------------------------------------- host RAM in Chinese, with an adverb between


def test_host_memory_not_enough_with_an_adverb_is_the_host() -> None:
    d = diagnose_text("离线推理跑到一半进程被kill，256G内存都不够吗？")
    assert d.cause == "host-oom-killer"


def test_gpu_memory_in_chinese_stays_the_gpu() -> None:
    d = diagnose_text("推理时GPU内存不足，报错退出")
    assert d.is_memory_failure
    assert d.cause != "host-oom-killer"


# ---------------------------------------------------------------- an evaluation harness's loglikelihood requests


def test_loglikelihood_requests_with_only_the_request_size_are_logprobs() -> None:
    d = diagnose_text(
        "lm_eval with the vllm backend fails with torch.OutOfMemoryError: CUDA out of memory as soon as the "
        "loglikelihood requests start: it tried to allocate 6.50 GiB."
    )
    assert d.cause == "logprobs-spike"
    assert d.phase == "serving"


def test_the_same_request_without_logprob_words_keeps_its_old_answer() -> None:
    d = diagnose_text(
        "lm_eval with the vllm backend fails with torch.OutOfMemoryError: CUDA out of memory as soon as the "
        "generation requests start: it tried to allocate 6.50 GiB."
    )
    assert d.cause != "logprobs-spike"


# ---------------------------------------------------------------- an offload layer's CPU buffer


LMCACHE_ENV = "\n".join(
    [
        'os.environ["LMCACHE_LOCAL_CPU"] = "True"',
        'os.environ["LMCACHE_MAX_LOCAL_CPU_SIZE"] = "20.0"',
    ]
)


def test_failing_to_allocate_beside_lmcaches_cpu_buffer_is_that_buffer() -> None:
    d = diagnose_text(
        "vLLM + LMCache: failing to allocate memory after a few hundred requests\n" + LMCACHE_ENV
    )
    assert d.is_memory_failure
    assert d.cause == "host-kv-buffer-exhausted"


def test_failing_to_allocate_is_a_failure_word() -> None:
    # the inflection alone (no LMCache): a failure, never "no failure"
    d = diagnose_text("The server keeps failing to allocate memory for new requests")
    assert d.is_memory_failure


def test_a_torch_oom_beside_lmcache_keeps_the_gpu() -> None:
    text = (
        LMCACHE_ENV
        + "\n"
        + (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.15 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.10 GiB memory in use. "
            "Of the allocated memory 77.00 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but "
            "unallocated."
        )
    )
    assert diagnose_text(text).cause != "host-kv-buffer-exhausted"


# ---------------------------------------------------------------- the KV cache running out, in words


def test_kv_cache_exhaustion_in_words_is_the_pool() -> None:
    d = diagnose_text(
        "Under load the server hits an OOM: KV cache exhaustion in the middle of long requests."
    )
    assert d.cause == "kv-pool-exhausted-runtime"
    assert d.phase == "serving"


# ---------------------------------------------------------------- a container's OOM kill beside version words


def test_an_oom_kill_after_an_upgrade_is_the_host() -> None:
    d = diagnose_text(
        "Pods get OOM Killed every few hours after upgrading the proxy image to the new release."
    )
    assert d.cause == "host-oom-killer"


def test_an_oom_after_an_upgrade_without_a_kill_stays_a_version_change() -> None:
    d = diagnose_text("The server hits OOM after upgrading to the new release; the old one fitted.")
    assert d.cause == "version-regression"


# ---------------------------------------------------------------- a crash that is not memory


def test_an_interpreter_crash_is_a_failure_but_not_memory() -> None:
    d = diagnose_text(
        "INFO 08-02 23:48:20 [executor_base.py:227] It took 0.07 seconds to wake up tags ['kv_cache'].\n"
        "Fatal Python error: none_dealloc: deallocating None"
    )
    assert d.cause == "not-oom"


def test_a_crash_after_an_oom_follows_the_oom() -> None:
    d = diagnose_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\nFatal Python error: Aborted"
    )
    assert d.is_memory_failure


# ---------------------------------------------------------------- shortened and emphasised OOM words


@pytest.mark.parametrize(
    "text",
    [
        "When serving, batch size 4 with 2k inputs: **oom occurs**.",
        "gpu-out-mem with --cpu-offload-gb 30, the offload does not help",
        "Training Memory Leak at various steps",
    ],
)
def test_shortened_or_emphasised_memory_words_are_a_failure(text: str) -> None:
    assert diagnose_text(text).is_memory_failure


def test_a_memory_leak_title_is_a_leak() -> None:
    assert diagnose_text("Training Memory Leak at various steps").cause == "memory-leak"


@pytest.mark.parametrize(
    "text",
    [
        "How do I set `oom_score_adj` for the server?",
        "the output buffer is named out_mem_ptr in the kernel",
    ],
)
def test_words_that_only_look_like_oom_are_no_failure(text: str) -> None:
    assert not diagnose_text(text).is_memory_failure


# ---------------------------------------------------------------- torch's process list in a container


def _torch_oom(processes: str, allocated: str, cached: str) -> str:
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 300.00 MiB. GPU 0 has a total capacity of "
        f"47.50 GiB of which 60.00 MiB is free. {processes} Of the allocated memory {allocated} is allocated by "
        f"PyTorch, and {cached} is reserved by PyTorch but unallocated."
    )


def test_a_listed_process_beside_this_pytorch_in_a_container_holds_the_card() -> None:
    # no `this process has`: torch in a container cannot name itself; 30 GiB listed + 16 GiB this PyTorch's = the card
    listed = "Process 4242 has 30.00 GiB memory in use. Process 4343 has 17.10 GiB memory in use."
    text = _torch_oom(listed, "15.60 GiB", "200.00 MiB")
    d = diagnose_text(text)
    assert d.cause == "gpu-util-exceeds-free-memory"
    assert d.confidence == "low"


def test_a_single_listed_process_that_is_this_pytorch_is_not_another() -> None:
    # the one listed process holds what this PyTorch reserved: itself, not a neighbour
    text = _torch_oom("Process 4242 has 47.10 GiB memory in use.", "46.30 GiB", "200.00 MiB")
    assert diagnose_text(text).cause != "gpu-util-exceeds-free-memory"


# ---------------------------------------------------------------- waking a sleeping engine

WAKE_TRACE = "\n".join(
    [
        "Traceback (most recent call last):",
        '  File "/opt/trainer/workers/rollout.py", line 88, in generate',
        "    self.inference_engine.wake_up()",
        '  File "/usr/lib/python3/site-packages/vllm/entrypoints/llm.py", line 1410, in wake_up',
        "    self.llm_engine.wake_up(tags)",
        '  File "/usr/lib/python3/site-packages/vllm/device_allocator/cumem.py", line 231, in wake_up',
        "    create_and_map(handle)",
        "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
    ]
)


def test_the_allocator_failing_at_wake_up_is_memory_held_by_someone_else() -> None:
    # wake_up re-creates exactly what the engine released at sleep: it no longer fits because someone else holds it
    d = diagnose_text(WAKE_TRACE)
    assert d.cause == "gpu-util-exceeds-free-memory"
    assert d.confidence == "medium"


def test_an_oom_told_after_a_wake_up_is_memory_held_by_someone_else() -> None:
    d = diagnose_text(
        "sleep() did not free anything and after wakeup the next generate fails with CUDA out of memory"
    )
    assert d.cause == "gpu-util-exceeds-free-memory"


def test_a_wake_up_that_succeeded_does_not_place_a_later_oom() -> None:
    # vLLM's own line after a successful wake-up, then an OOM inside a request's forward
    text = "\n".join(
        [
            "INFO 08-02 23:48:05 [executor_base.py:227] It took 0.61 seconds to wake up tags ['weights'].",
            "Traceback (most recent call last):",
            '  File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_model_runner.py", line 1500, in execute_model',
            "    hidden = self.model(input_ids)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB. GPU 0 has a total capacity of "
            "79.15 GiB of which 2.00 GiB is free. Including non-PyTorch memory, this process has 77.10 GiB memory in "
            "use. Of the allocated memory 76.00 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but "
            "unallocated.",
        ]
    )
    assert diagnose_text(text).cause != "gpu-util-exceeds-free-memory"


def test_the_allocators_failure_outside_a_wake_up_keeps_its_old_answer() -> None:
    d = diagnose_text("RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62")
    assert d.cause == "non-torch-allocation-oom"
