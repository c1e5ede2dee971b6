"""General rules from the dev13 round (issue 9): short, prose-heavy excerpts from web pages, read as facts.

Each rule reads a mechanism, not a page: a training run's large tensor, vLLM's single-request KV check cut after its
first words, a memory monitor named as the agent of a kill, `no space left on device` beside words that name shared
memory, an exception told inside a sentence. Every text here is synthesised (no page's text); each rule has a
counterpart that must keep its old answer, so that no rule is simply always on. Every positive test fails on the
round's base (e1f7f07). The development logs the rules came from are scored by scripts/eval_oom.py, not here.
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text

# ---------------------------------------------------------------- a training run's large tensor is its activations

BIG = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.50 GiB. GPU 0 has a total capacity of 39.39 GiB "
    "of which 4.10 GiB is free. Including non-PyTorch memory, this process has 35.28 GiB memory in use.\n"
)


@pytest.mark.parametrize(
    "words",
    ["OOM in my reward-model training loop, step 12\n", "fine-tuning a 7B with LoRA, batch 16, crashes:\n"],
)
def test_a_large_tensor_in_a_training_run_is_an_activation_spike(words: str) -> None:
    d = diagnose_text(words + BIG)
    assert d.cause == "activation-spike"
    assert d.cause != "multimodal-profiling-oom"


def test_a_bare_large_tensor_keeps_the_encoder_profiling_reading() -> None:
    d = diagnose_text(BIG)
    assert d.cause == "multimodal-profiling-oom"


def test_a_large_tensor_of_a_multimodal_model_in_training_words_stays_multimodal() -> None:
    d = diagnose_text("training the vision encoder of Qwen2-VL with image inputs\n" + BIG)
    assert d.cause != "activation-spike"


OLD_WORDING = (
    "RuntimeError: CUDA out of memory. Tried to allocate 3.00 GiB (GPU 0; 10.76 GiB total capacity; 6.00 GiB already "
    "allocated; 2.40 GiB free; 6.20 GiB reserved in total by PyTorch)\n"
)


def test_a_large_tensor_in_torch_pre_2_1_wording_is_an_activation_spike() -> None:
    d = diagnose_text("why does this happen on my desktop card?\n" + OLD_WORDING)
    assert d.cause == "activation-spike"


def test_a_large_tensor_in_torch_pre_2_1_wording_of_a_multimodal_model_stays_multimodal() -> None:
    d = diagnose_text("llava-hf/llava-1.5-7b-hf image inputs\n" + OLD_WORDING)
    assert d.cause != "activation-spike"


# ---------------------------------------------------------------- vLLM's single-request KV check, cut


@pytest.mark.parametrize(
    "text",
    [
        "(EngineCore pid=77) ERROR [core.py:901] ValueError: To serve at least one\n",
        "serve fails at start: ValueError: To serve at least one request with the model...\n",
    ],
)
def test_the_cut_single_request_kv_check_is_the_context(text: str) -> None:
    d = diagnose_text(text)
    assert d.cause == "kv-cache-too-small-for-max-model-len"
    assert d.phase == "kv-alloc"
    assert d.confidence == "medium"


def test_the_full_single_request_kv_check_keeps_its_numbers_and_confidence() -> None:
    d = diagnose_text(
        "ValueError: To serve at least one request with the model's max seq len (65536), (8.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (2.00 GiB). Based on the available memory, the "
        "estimated maximum model length is 16384.\n"
    )
    assert d.cause == "kv-cache-too-small-for-max-model-len"
    assert d.confidence == "high"
    assert any(f.flag == "--max-model-len" and str(f.value) == "16384" for f in d.fixes)


def test_serving_words_without_the_check_are_not_the_kv_check() -> None:
    d = diagnose_text("ValueError: To serve the model you need a token\n")
    assert d.cause != "kv-cache-too-small-for-max-model-len"


# ---------------------------------------------------------------- a memory monitor named as the agent of a kill


@pytest.mark.parametrize(
    "text",
    [
        "Ray's memory monitor killed two workers while the batch job ran\n",
        "the raylet memory monitor kills tasks once host usage crosses the threshold\n",
    ],
)
def test_a_memory_monitor_that_kills_is_the_host(text: str) -> None:
    d = diagnose_text(text)
    assert d.cause == "host-oom-killer"


def test_a_memory_monitor_without_a_kill_is_not_a_failure() -> None:
    d = diagnose_text("INFO the memory monitor is enabled, refresh 250 ms\n")
    assert not d.is_memory_failure


# ---------------------------------------------------------------- no space left beside words that name shared memory


def test_no_space_with_shared_memory_words_is_shm() -> None:
    d = diagnose_text("OSError: No space left on device, because the container has insufficient shared memory\n")
    assert d.cause == "host-shm-exhausted"
    assert any(f.flag == "--shm-size" for f in d.fixes)


def test_no_space_alone_is_a_full_disk() -> None:
    d = diagnose_text("OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub'\n")
    assert d.cause == "not-oom"


# ---------------------------------------------------------------- an exception told inside a sentence


@pytest.mark.parametrize(
    "text",
    [
        "After the upgrade the server responds with ValueError: prompt is longer than the context window\n",
        "Loading the adapter, it raises KeyError: lora_B is missing from the checkpoint\n",
    ],
)
def test_an_exception_in_a_sentence_is_a_failure_that_is_not_memory(text: str) -> None:
    d = diagnose_text(text)
    assert d.cause == "not-oom"


@pytest.mark.parametrize(
    "text",
    [
        "If you see ValueError: bad config, check the YAML keys\n",
        "The FAQ page explains what a ValueError: bad config means for the YAML keys\n",
    ],
)
def test_an_exception_named_in_advice_is_not_a_failure(text: str) -> None:
    d = diagnose_text(text)
    assert d.cause == "no-failure"
