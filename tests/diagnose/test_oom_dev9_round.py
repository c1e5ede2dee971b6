"""General rules from the dev9 round (issue 9): a start-up that died without an error line, and facts in words.

Every text here is synthesised (no thread's text); each rule has a counterpart that must keep its old answer, so that
no rule is simply always on (a stall, a log that reached serving, advice). The development logs the rules came from
are scored by scripts/eval_oom.py, not here.
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text

LOADING = "\n".join(
    [
        "INFO 05-02 10:00:01 [core.py:70] Initializing a V1 LLM engine (v0.10.1) with config: model='org/model-14b'",
        "INFO 05-02 10:00:05 [gpu_model_runner.py:1800] Starting to load model org/model-14b...",
        "Loading safetensors checkpoint shards:   0% Completed | 0/6 [00:00<?, ?it/s]",
        "Loading safetensors checkpoint shards:  33% Completed | 2/6 [00:04<00:08,  2.10s/it]",
        "Loading safetensors checkpoint shards:  50% Completed | 3/6 [00:06<00:06,  2.05s/it]",
    ]
)
SERVING = "\n".join(
    [
        LOADING,
        "Loading safetensors checkpoint shards: 100% Completed | 6/6 [00:12<00:00,  2.01s/it]",
        "INFO 05-02 10:00:20 [gpu_worker.py:276] Available KV cache memory: 20.15 GiB",
        "INFO 05-02 10:00:31 [gpu_model_runner.py:2300] Graph capturing finished in 9 secs, took 0.61 GiB",
        "INFO 05-02 10:00:32 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000",
    ]
)

# ---------------------------------------------------------------- a start-up that died without an error line


@pytest.mark.parametrize(
    "words",
    [
        "The server can't start: the server task ended while the shards were loading.",
        "vllm exited without any error during startup, this is the whole log:",
        "服务启动失败，日志如下：",
    ],
)
def test_a_startup_said_to_end_in_a_log_that_stops_inside_it_is_a_kill(words: str) -> None:
    # no error line, the last progress line inside weight loading, and the report says the process went away: an
    # engine or PyTorch raises on every memory failure it detects, a process that vanishes was sent SIGKILL
    d = diagnose_text(words + "\n" + LOADING)
    assert d.is_memory_failure
    assert d.cause == "host-oom-killer"
    assert d.phase == "weights-load"
    assert d.confidence == "low"
    assert any(f.flag == "--max-parallel-loading-workers" for f in d.fixes)


@pytest.mark.parametrize(
    "words",
    [
        "The server can't start: it is stuck while the shards are loading, no progress for an hour.",
        "Startup hangs after this line and never finishes:",
    ],
)
def test_a_stall_at_startup_is_not_a_kill(words: str) -> None:
    # counterpart: a start-up that stalls (stuck, hangs) did not end; no memory failure is shown
    assert not diagnose_text(words + "\n" + LOADING).is_memory_failure


def test_a_log_that_reached_serving_is_not_a_startup_death() -> None:
    # counterpart: the same words over a log whose engine came up: the start-up finished, whatever the words say
    assert not diagnose_text("The server task ended after a while.\n" + SERVING).is_memory_failure


def test_a_log_that_stops_inside_startup_without_such_words_is_still_no_failure() -> None:
    # counterpart: a healthy excerpt cut while loading, with no report that anything ended
    assert not diagnose_text("Here is my log so far:\n" + LOADING).is_memory_failure


# ---------------------------------------------------------------- `oom` in lower case, as a word


@pytest.mark.parametrize(
    "text",
    [
        "training dies after a few minutes with a memory oom error",
        "we hit a gpu oom when the batch grows",
        "rollout: oom happened at step 45",
    ],
)
def test_lower_case_oom_next_to_a_memory_or_failure_word_is_a_failure(text: str) -> None:
    d = diagnose_text(text)
    assert d.is_memory_failure


@pytest.mark.parametrize(
    "text",
    [
        "set oom_score_adj to -1000 for the server",
        "no oom error so far after the fix",
        "To avoid an oom error, lower the batch size.",
    ],
)
def test_oom_in_a_setting_a_denial_or_advice_is_not_a_failure(text: str) -> None:
    # counterpart: `oom_score_adj` (a word of its own), a denial, advice
    assert not diagnose_text(text).is_memory_failure


# ---------------------------------------------------------------- the sampler warm-up named in the failure's words


@pytest.mark.parametrize(
    "text",
    [
        "CUDA OOM during sampler warmup with a 160k-vocabulary model on vLLM nightly",
        "The top-k sampler needs a bigger buffer: the warm-up OOMs on H100",
        "OOM while warming up the sampler after the KV cache was allocated",
    ],
)
def test_the_sampler_warmup_named_in_words_is_a_sampler_warmup_oom(text: str) -> None:
    # vLLM warms the sampler up with max_num_seqs dummy requests (fp32 logits of max_num_seqs x vocab); a report that
    # names it places the failure there
    d = diagnose_text(text)
    assert d.cause == "sampler-warmup-oom"
    assert d.confidence == "low"


def test_a_sampler_named_without_a_warmup_keeps_its_reading() -> None:
    # counterpart: the sampler named while serving requests is not the start-up warm-up
    d = diagnose_text("OOM in the sampler during inference with 64 concurrent requests")
    assert d.is_memory_failure
    assert d.cause != "sampler-warmup-oom"


# ---------------------------------------------------------------- a version change in the failure's sentence


@pytest.mark.parametrize(
    "text",
    [
        "Severe OOM in 0.9.2 (ok in 0.8.5)",
        "Severe OOM in 0.9.2 （ok in 0.8.5）",
        "after I upgraded vllm to 0.9.2 the same model goes OOM at startup",
    ],
)
def test_a_failure_whose_sentence_names_a_working_version_is_a_regression(text: str) -> None:
    d = diagnose_text(text)
    assert d.cause == "version-regression"
    assert d.confidence == "low"


@pytest.mark.parametrize(
    "text",
    [
        "OOM in 0.9.2, fixed in 0.9.3",
        "OOM with a 32k context; works with 8k",
    ],
)
def test_a_fix_announced_or_a_size_that_works_is_not_a_regression(text: str) -> None:
    # counterpart: a fix release, a smaller setting that works (no version)
    d = diagnose_text(text)
    assert d.cause != "version-regression"


# ---------------------------------------------------------------- a cut traceback next to a build / import failure


CUT = "\n".join(
    [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py", line 188, in initialize',
        "    self.load_model()",
        '  File "/usr/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py", line 400, in load_model',
        "    self.model = get_model(",
        '  File "/usr/lib/python3.11/site-packages/sglang/srt/model_loader/loader.py", line 365, in load_model',
        "    model = _initialize_model(",
    ]
)


def test_a_cut_traceback_under_a_build_failure_is_not_a_memory_failure() -> None:
    # the words name what was raised (a JIT build that needs a missing header): the frames are where it was raised
    d = diagnose_text("Server fails at start: the kernel JIT requires cuda_fp8.h, which the wheel lacks\n" + CUT)
    assert d.cause == "not-oom"


def test_a_cut_traceback_in_weight_loading_keeps_its_reading() -> None:
    # counterpart: the same cut with nothing naming another failure stays the weights' low guess
    d = diagnose_text("Server fails at start with this traceback\n" + CUT)
    assert d.cause == "weights-do-not-fit"


# ---------------------------------------------------------------- a utilisation no start-up can meet


@pytest.mark.parametrize(
    "text",
    [
        "Cannot load a 3B model on a 16 GB card when gpu_memory_utilization=1",
        "vllm serve org/model-3b --gpu-memory-utilization 1.0 fails to start, no error message",
        "can't start the server with gpu_memory_utilisation=0.99",
    ],
)
def test_a_failed_start_at_a_utilisation_no_card_can_free_is_the_startup_budget(text: str) -> None:
    # vLLM wants utilisation x total free at start-up; its own CUDA context is already in use, so >= 0.99 never fits
    d = diagnose_text(text)
    assert d.cause == "gpu-util-exceeds-free-memory"
    assert d.confidence == "low"
    assert any(f.flag == "--gpu-memory-utilization" and f.value is not None for f in d.fixes)


@pytest.mark.parametrize(
    "text",
    [
        "vllm serve org/model-3b --gpu-memory-utilization 0.9 fails to start, no error message",
        "We run with gpu_memory_utilization=1 and it works fine.",
        "Startup hangs with gpu_memory_utilization=1, stuck after the banner",
    ],
)
def test_a_utilisation_without_a_failed_start_or_a_possible_one_is_no_failure(text: str) -> None:
    # counterpart: a possible utilisation, no report of a failed start, a stall
    assert not diagnose_text(text).is_memory_failure


def test_a_utilisation_of_one_on_vllm_0_34_is_no_startup_budget_failure() -> None:
    # vLLM 0.34's extensible KV cache has no start-up free-memory check and u = 1.0 is its default
    told = "vllm serve org/model-3b --gpu-memory-utilization 1.0 fails to start, no error message\n"
    assert diagnose_text("INFO 12-01 10:00:00 [__init__.py:239] vLLM version 0.33.0\n" + told).cause == (
        "gpu-util-exceeds-free-memory"
    )
    assert diagnose_text("INFO 12-01 10:00:00 [__init__.py:239] vLLM version 0.34.0\n" + told).cause != (
        "gpu-util-exceeds-free-memory"
    )
