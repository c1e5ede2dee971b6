"""General rules from the dev11 round (issue 9): reports that tell the failure in a title and its cause in the body.

RL stacks (unsloth, NeMo-RL, Open-R1), serving wrappers (Triton's backends, OpenLLM, GPUStack, SkyPilot), model repos.
Every text here is synthesised (no thread's text); each rule has a counterpart that must keep its old answer, so that
no rule is simply always on. Every positive test fails on the round's base (02d5b7d). The development logs the rules
came from are scored by scripts/eval_oom.py, not here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vramctl.diagnose import diagnose, diagnose_text

TORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
    "of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. Of the "
    "allocated memory 77.30 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated."
)

# ---------------------------------------------------------------- fragmentation named in a report's words


@pytest.mark.parametrize(
    "text",
    [
        "Training crashes with OOM caused by memory fragmentation after a few steps",
        "OOM in the 3rd step; we believe the fragmentation is the cause, since usage is far below the card",
        "推理一段时间后显存不足，怀疑是显存碎片导致的",
    ],
)
def test_fragmentation_in_words_without_numbers_is_fragmentation(text: str) -> None:
    d = diagnose_text(text)
    assert d.is_memory_failure
    assert d.cause == "allocator-fragmentation"
    assert d.confidence == "low"
    fix = next(f for f in d.fixes if f.flag == "PYTORCH_CUDA_ALLOC_CONF")
    assert fix.value == "expandable_segments:True"


def test_torchs_own_advice_about_fragmentation_is_not_a_report_of_it() -> None:
    # torch's message ends "... to avoid fragmentation": the numbers decide (here: no cached block holds 2 GiB, the
    # card is full), not the advice's word
    advice = " If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    d = diagnose_text("OOM while serving requests\n" + TORCH_OOM + advice + " to avoid fragmentation.")
    assert d.is_memory_failure
    assert d.cause != "allocator-fragmentation"
    plain = diagnose_text("Training crashes with OOM after a few steps")
    assert plain.cause != "allocator-fragmentation"


# ---------------------------------------------------------------- memory held by someone else, in words


@pytest.mark.parametrize(
    "text",
    [
        "a stress tool occupies 90% of the remaining free GPU memory; the next request fails with OOM",
        "OOM error: most of the card is occupied by another job on the node",
        "服务启动后显存不足，显存被其他进程占用",
    ],
)
def test_memory_held_by_another_occupant_is_the_start_budget(text: str) -> None:
    d = diagnose_text(text)
    assert d.is_memory_failure
    assert d.cause == "gpu-util-exceeds-free-memory"


def test_a_failure_without_an_occupant_keeps_the_old_answer() -> None:
    d = diagnose_text("the next request fails with OOM after a few minutes of traffic")
    assert d.cause != "gpu-util-exceeds-free-memory"


# ---------------------------------------------------------------- a request named in words places the failure


@pytest.mark.parametrize(
    "text",
    [
        "When sending a request with a long video, an OOM error was reported",
        "the server starts fine, but every time I send a request it goes OOM",
    ],
)
def test_a_request_in_words_places_the_failure_while_serving(text: str) -> None:
    d = diagnose_text(text)
    assert d.is_memory_failure
    assert d.phase == "serving"


def test_without_request_words_the_phase_stays_unknown() -> None:
    assert diagnose_text("an OOM error was reported with a long video").phase == "unknown"


# ---------------------------------------------------------------- the container's memory limit


def test_a_container_limit_named_below_a_title_is_the_host_with_the_limit_raised() -> None:
    text = "\n".join(
        [
            "Serving a 9B model in docker runs out of memory",
            "docker run --gpus 1 --ipc=host vllm/vllm-openai:latest --model some/model-9b --max-model-len=4000",
            "It dies on oom without any error; nvidia-smi shows the GPU far from full.",
            "",
            "Update: I had limited the container to 6gb. With more memory available to the container it works.",
        ]
    )
    d = diagnose_text(text)
    assert d.cause == "host-oom-killer"
    assert d.confidence == "low"
    fix = next(f for f in d.fixes if f.flag == "resources.limits.memory")
    assert fix.value == "9Gi"  # the stated 6 GiB limit plus half


def test_a_container_limit_does_not_override_the_allocators_numbers() -> None:
    d = diagnose_text("the container memory limit is 64 GiB\n" + TORCH_OOM)
    assert d.cause != "host-oom-killer"


# ---------------------------------------------------------------- a native assertion is a failure, not memory


@pytest.mark.parametrize(
    "line",
    [
        "[TensorRT-LLM][ERROR] Encountered an error in forward function: [TensorRT-LLM][ERROR] Assertion failed: "
        "input_ids: expected 2 dims, provided 1 dims (/src/runtime/tllmRuntime.cpp:138)",
        "engine_main: /src/runtime/executor.cc:212: void Executor::run(): Assertion `slots > 0' failed.",
    ],
)
def test_a_native_assertion_is_not_oom(line: str) -> None:
    d = diagnose_text("server log\n" + line)
    assert d.cause == "not-oom"


def test_an_assertion_after_a_memory_failure_follows_it() -> None:
    text = TORCH_OOM + "\n[TensorRT-LLM][ERROR] Assertion failed: buffer is null (/src/runtime/buffers.cpp:12)"
    d = diagnose_text("while serving requests\n" + text)
    assert d.cause != "not-oom"


# ---------------------------------------------------------------- a failure told in the title reads the body's hints


def test_a_title_failure_reads_a_colocated_trainer_named_below_it() -> None:
    text = "\n".join(
        [
            "GRPO OOM",
            "config",
            "",
            "model_name_or_path: some/model-7b",
            "use_vllm: true",
            "vllm_gpu_memory_utilization: 0.7",
            "num_generations: 4",
        ]
    )
    d = diagnose_text(text)
    assert d.cause == "gpu-util-exceeds-free-memory"
    assert any(f.flag == "vllm_gpu_memory_utilization" and f.value == "0.6" for f in d.fixes)


def test_a_failure_further_down_does_not_read_hints_printed_after_it() -> None:
    # the whole-log hints still count only up to the failure when the failure is not the report's title
    text = "\n".join(
        [
            "step 1 done",
            "step 2 done",
            "step 3 done",
            "GRPO step 4: OOM",
            "later config dump:",
            "vllm_gpu_memory_utilization: 0.7",
        ]
    )
    assert diagnose_text(text).cause != "gpu-util-exceeds-free-memory"


# ---------------------------------------------------------------- the card a report names gives the plan its total


def _report(tmp_path: Path, gpu_words: str) -> Path:
    path = tmp_path / "report.log"
    path.write_text(
        "\n".join(
            [
                "the model fails to start with an OOM error on GPU 0, tensor parallelism configured",
                f"Hardware: {gpu_words}",
                "INFO 01-02 03:04:05 [llm_engine.py:243] Initializing a V0 LLM engine (v0.8.4) with config: "
                "model='meta-llama/Llama-4-Scout-17B-16E', tokenizer='meta-llama/Llama-4-Scout-17B-16E', "
                "dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=4, pipeline_parallel_size=1",
            ]
        )
        + "\n"
    )
    return path


def test_a_card_named_in_words_lets_the_plan_say_the_weights_do_not_fit(tmp_path: Path) -> None:
    # about 109 B parameters in bf16 over TP 4 is ~53 GiB per rank: more than a whole 48 GB L40S
    d = diagnose(str(_report(tmp_path, "4x NVIDIA L40S GPUs, 48GB each")))
    assert d.cause == "weights-do-not-fit"
    assert any(f.flag == "--tensor-parallel-size" and f.value == "8" for f in d.fixes)


@pytest.mark.parametrize("gpu_words", ["4 GPUs of an unnamed kind", "2x NVIDIA L40S and 2x NVIDIA A100-SXM4-80GB"])
def test_no_card_or_two_cards_named_give_no_plan(tmp_path: Path, gpu_words: str) -> None:
    # nothing to plan against, or two boards: never a guess between them
    assert diagnose(str(_report(tmp_path, gpu_words))).cause != "weights-do-not-fit"


# ---------------------------------------------------------------- wrong outputs are a failure, not memory


@pytest.mark.parametrize(
    "text",
    [
        "After the second refit the rollouts are garbage output and the KL error explodes",
        "the server runs, but a sleep / wake-up cycle silently corrupts every generation after it",
    ],
)
def test_wrong_outputs_in_words_are_not_oom(text: str) -> None:
    assert diagnose_text(text).cause == "not-oom"


def test_wrong_outputs_beside_a_memory_failure_follow_it() -> None:
    d = diagnose_text("the completions turned to gibberish, then the server died with CUDA out of memory while serving")
    assert d.is_memory_failure
