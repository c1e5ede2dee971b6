"""General rules from the dev8 round (issue 9): failures told in words, and the facts their words give.

Every text here is synthesised (no thread's text); each rule has a counterpart that must keep its old answer, so that
no rule is simply always on (questions, advice and complaints stay no failure). The development logs the rules came
from are scored by scripts/eval_oom.py, not here.
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text

# ---------------------------------------------------------------- a process killed, said with no agent


@pytest.mark.parametrize(
    "text",
    [
        "Converting the checkpoint to the engine format, but the program always be killed, no other output.",
        "It gets killed every time I start the 70B model on this box.",
        "The build process keeps getting killed after a few minutes.",
    ],
)
def test_a_process_killed_with_no_agent_is_the_host_oom_killer(text: str) -> None:
    # a process that dies of SIGKILL without an error of its own: on Linux the sender is the kernel's or a cgroup's
    # OOM killer (a person who killed it says so: "I killed it")
    d = diagnose_text(text)
    assert d.is_memory_failure
    assert d.cause == "host-oom-killer"
    assert d.confidence == "low"


@pytest.mark.parametrize(
    "text",
    [
        "The process will be killed if it exceeds the container's limit.",
        "The old server process gets killed by the deploy script before the new one starts.",
        "I killed the process with Ctrl-C after it printed the banner.",
    ],
)
def test_advice_or_a_named_killer_is_not_a_host_kill(text: str) -> None:
    # counterpart: advice (will be killed), a killer that is not the kernel (by the deploy script), a person's own kill
    assert not diagnose_text(text).is_memory_failure


# ---------------------------------------------------------------- host RAM too small to load, in words


def test_host_ram_said_to_prevent_loading_is_a_host_memory_failure() -> None:
    # the weights are read through host memory before they reach the GPU: a host too small stops the load whatever
    # the card has
    d = diagnose_text("Limited system RAM prevents the shard from loading, although the GPU has 48 GB free.")
    assert d.cause == "host-oom-killer"
    assert d.phase == "weights-load"


def test_a_question_about_host_ram_is_not_a_failure() -> None:
    # counterpart: asking how much RAM loading needs names no failure
    assert not diagnose_text("How much system RAM do I need to load a 70B model with 4 shards?").is_memory_failure


# ---------------------------------------------------------------- Ray's OOM is the host's


def test_ray_oom_in_words_is_the_host() -> None:
    # Ray's OOM is its memory monitor killing workers when the node's RAM crosses its threshold, never the GPU
    d = diagnose_text("Training stops after 40 steps with a Ray OOM, how should I set the batch sizes?")
    assert d.cause == "host-oom-killer"


def test_a_gpu_oom_inside_a_ray_worker_stays_a_gpu_failure() -> None:
    # counterpart: a CUDA OOM reported from a Ray worker is the GPU's
    d = diagnose_text("The Ray worker hit CUDA OOM during generation with 64 concurrent requests.")
    assert d.is_memory_failure
    assert d.cause != "host-oom-killer"


# ---------------------------------------------------------------- "during model loading" places the weights


def test_oom_during_model_loading_is_the_weights() -> None:
    d = diagnose_text("[Bug] OOM during model loading for a 120B model on one 80 GB card")
    assert d.cause == "weights-do-not-fit"
    assert d.phase == "weights-load"


def test_oom_during_inference_is_not_the_weights() -> None:
    # counterpart: the same words about serving place the failure in serving
    d = diagnose_text("[Bug] OOM during inference for a 120B model on one 80 GB card")
    assert d.is_memory_failure
    assert d.cause != "weights-do-not-fit"


# ---------------------------------------------------------------- SGLang's decode OOM, abbreviated


def test_sglang_decode_oom_abbreviated_is_its_kv_pool() -> None:
    # SGLang's scheduler reports `Decode out of memory happened` when the KV pool cannot hold the next decode step;
    # reports shorten it to `Decode OOM`
    text = (
        "[Bug] Decode OOM with page size 64 under a multi-turn benchmark\n"
        "python3 -m sglang.launch_server --model-path org/model-8b --mem-fraction-static 0.6 --page-size 64\n"
    )
    d = diagnose_text(text)
    assert d.cause == "kv-pool-exhausted-runtime"
    assert d.phase == "serving"


def test_an_oom_while_decoding_in_other_words_is_not_that_event() -> None:
    # counterpart: only the scheduler's capitalised `Decode` / `Prefill` event names the pool; prose about decoding
    # in a vLLM log keeps the generic reading
    text = (
        "vllm serve org/model-8b --max-model-len 8192\n"
        "The server hits an OOM while decoding long answers.\n"
    )
    assert diagnose_text(text).cause != "kv-pool-exhausted-runtime"


# ---------------------------------------------------------------- Ollama's system-memory check


@pytest.mark.parametrize(
    "line",
    [
        "Error: model requires more system memory (21.0 GiB) than is available (17.5 GiB)",
        'ResponseError: {"error":"model requires more system memory (6.2 GiB) than is available (5.9 GiB)"} (status code: 500)',
    ],
)
def test_ollamas_system_memory_check_is_the_model_not_fitting(line: str) -> None:
    # Ollama (llm/server.go) keeps the part of its estimate that does not fit on the GPUs in system RAM and refuses to
    # load when that exceeds free RAM + swap: nothing ran out or was killed; the model, at that context, does not fit
    d = diagnose_text(line + "\n")
    assert d.cause == "weights-do-not-fit"
    assert d.phase == "startup-check"
    assert any(f.flag == "num_ctx" and f.value for f in d.fixes)
    # fewer GPU layers or more GPU overhead would move MORE of the model into the RAM that is short
    assert not any(f.flag in ("num_gpu", "OLLAMA_GPU_OVERHEAD") for f in d.fixes)
    assert not any(f.flag and f.flag.startswith("--") for f in d.fixes)


def test_ollamas_memory_report_line_is_not_a_failure() -> None:
    # counterpart: the scheduler's routine report of system memory is no failure
    text = 'time=2025-01-01T10:00:00Z level=INFO source=server.go:100 msg="system memory" total="31.1 GiB" free="20.0 GiB"\n'
    assert not diagnose_text(text).is_memory_failure


# ---------------------------------------------------------------- a failure dated to a version change


@pytest.mark.parametrize(
    "text",
    [
        "从0.7.0开始，同样的配置启动就出现OOM",
        "After pulling in master this morning I get OOM crashes with the same flags.",
        "v2.1.0 runs into out of memory with 8 requests while v2.0.3 does not.",
        "Since v0.9.1 the same command OOMs at start-up.",
    ],
)
def test_a_failure_dated_to_a_version_change_is_a_regression(text: str) -> None:
    # the same deployment fitted before the change: what grew is the stack's own memory
    d = diagnose_text(text)
    assert d.cause == "version-regression"
    assert d.confidence == "low"


@pytest.mark.parametrize(
    "text",
    [
        "OOM since the request had 100000 tokens.",
        "The OOM was fixed in 0.9.2, thanks.",
        "OOM from a 2.50 GiB allocation while loading the model.",
    ],
)
def test_a_failure_without_a_version_change_is_not_a_regression(text: str) -> None:
    # counterpart: "since" without a version, a fix announced for a version, a size after "from"
    assert diagnose_text(text).cause != "version-regression"


# ---------------------------------------------------------------- vLLM V0's KV capacity check in a cut traceback

_CUT = (
    "ERROR 01-01 10:00:00 worker_base.py:157] Error executing method initialize_cache.\n"
    "ERROR 01-01 10:00:00 worker_base.py:157] Traceback (most recent call last):\n"
    'ERROR 01-01 10:00:00 worker_base.py:157]   File "/venv/vllm/worker/worker.py", line 171, in initialize_cache\n'
    "ERROR 01-01 10:00:00 worker_base.py:157]     raise_if_cache_size_invalid(num_gpu_blocks,\n"
    'ERROR 01-01 10:00:00 worker_base.py:157]   File "/venv/vllm/worker/worker.py", line 335, in raise\n'
)


def test_a_traceback_cut_in_the_kv_capacity_check_is_the_context_not_fitting() -> None:
    # raise_if_cache_size_invalid allocates nothing: it raises one of the engine's two KV capacity checks; with blocks
    # left, the one that fires is "max seq len larger than the tokens the KV cache can store"
    d = diagnose_text("Not enough memory when serving a 33B model on two cards\n" + _CUT)
    assert d.cause == "kv-cache-too-small-for-max-model-len"
    assert d.phase == "kv-alloc"


def test_the_kv_capacity_check_with_no_blocks_is_no_kv_cache_memory() -> None:
    text = "INFO 01-01 10:00:00 gpu_executor.py:114] # GPU blocks: 0, # CPU blocks: 512\n" + _CUT
    assert diagnose_text(text).cause == "no-kv-cache-memory"


def test_a_traceback_cut_in_the_kv_allocation_stays_an_overcommit() -> None:
    # counterpart: a cut traceback in the function that allocates the cache is the pool not fitting
    text = (
        "ERROR 01-01 10:00:00 worker_base.py:157] Traceback (most recent call last):\n"
        'ERROR 01-01 10:00:00 worker_base.py:157]   File "/venv/vllm/worker/worker.py", line 199, in _init_cache_engine\n'
        "ERROR 01-01 10:00:00 worker_base.py:157]     self.cache_engine = CacheEngine(\n"
    )
    assert diagnose_text(text).cause == "kv-pool-overcommit"


# ---------------------------------------------------------------- progress markers inside longer phrases; calibration

_V0_HEAD = (
    "INFO 01-01 10:00:00 llm_engine.py:100] Initializing an LLM engine (v0.4.2) with config: model='org/m-2b', "
    "max_seq_len=4096\n"
    "INFO 01-01 10:00:09 model_runner.py:175] Loading model weights took 5.1 GB\n"
)


def test_v0_gpu_blocks_line_is_a_progress_marker() -> None:
    # vLLM V0 prints `# GPU blocks: N, # CPU blocks: M` once profiling has sized the KV pool, before it allocates it;
    # the facts line's longer key used to hide the marker inside it: a log that ends there finished the profiling
    d = diagnose_text(_V0_HEAD + "INFO 01-01 10:00:10 gpu_executor.py:114] # GPU blocks: 2000, # CPU blocks: 512\n")
    assert d.cause == "no-failure"
    assert d.phase == "profiling"


def test_a_log_ending_after_the_weights_reports_the_weights() -> None:
    # counterpart: without the blocks line the last finished step is the weights
    d = diagnose_text(_V0_HEAD)
    assert d.cause == "no-failure"
    assert d.phase == "weights-load"


def test_a_failure_quoted_above_the_log_is_placed_by_inference_at_most_medium() -> None:
    # a title on top of the pasted log: the progress lines BELOW it place the failure only by inference, so an answer
    # that would be high when a line before the failure places it is medium (the documented calibration)
    text = (
        "[Bug]: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)` after the weights load\n"
        + _V0_HEAD
    )
    d = diagnose_text(text)
    assert d.is_memory_failure
    assert d.confidence == "medium"


def test_the_same_failure_placed_by_a_line_before_it_keeps_its_confidence() -> None:
    # counterpart: the same failure after the progress lines is placed by them
    text = _V0_HEAD + "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n"
    d = diagnose_text(text)
    assert d.is_memory_failure
    assert d.confidence == "high"
