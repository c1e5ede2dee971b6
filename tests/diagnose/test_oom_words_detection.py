"""Detection of memory failures told in a person's words (issue 9: "no real failure reported as no failure").

A report is often a title or a few sentences, not a pasted log: memory that keeps growing or is never given back, a
KV cache stuck full while the server stops answering, a prompt larger than the whole KV pool, a container out of
shared memory. Each wording maps to facts (the kind of failure, whether it is a time series, what its words name) and
the cause follows from them, always with `low` confidence. Every text here is synthesised; each positive has a
counterpart that must stay "no failure" (a question, advice, a normal reading), so that no rule is simply always on.
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text

# ---------------------------------------------------------------- memory over time


@pytest.mark.parametrize(
    "text",
    [
        "[Bug]: memory leak with the OpenAI server",
        "Our worker leaks GPU memory on every request",
        "GPU memory keeps increasing until the worker dies",
        "The host RAM usage continues to grow over a day of serving",
        "non-torch memory shows a gradual increase from 1G to 6G",
        "After the benchmark ends the memory usage did not decrease at all.",
        "推理一段时间后显存持续升高",
    ],
)
def test_memory_that_grows_or_is_never_given_back_is_a_leak(text: str) -> None:
    # growth over time at constant use, or memory never returned after the load ended: what the engine took it
    # keeps, which is what a leak is (never "no failure", and low: nobody measured the series)
    d = diagnose_text(text)
    assert d.cause == "memory-leak"
    assert d.phase == "serving"
    assert d.confidence == "low"


@pytest.mark.parametrize(
    "text",
    [
        "This is not a memory leak: vLLM preallocates 90 % of the card by design.",
        "There appear to be 1 leaked semaphore objects to clean up at shutdown",
        "The RAM is used while loading and it is released after the model is loaded.",
        "If you see memory keep increasing, lower --max-num-seqs.",
    ],
)
def test_denials_advice_and_released_memory_are_not_leaks(text: str) -> None:
    # a denial, Python's resource-tracker warning, memory that *was* released and advice name no failure
    assert diagnose_text(text).cause == "no-failure"


def test_memory_a_previous_job_left_behind_is_the_start_up_budget() -> None:
    # the memory model: who held the memory when the engine started. A previous job's memory still on the card is
    # another holder, which vLLM's start-up check (utilisation x total against the free memory) then fails on
    d = diagnose_text("Memory from the previous job is not freed, so the engine hits gpu_memory_utilization errors")
    assert d.cause == "gpu-util-exceeds-free-memory"
    assert d.phase == "startup-check"


def test_growth_blamed_on_fragmentation_is_fragmentation() -> None:
    # the words name the allocator's layout, and its own switch: growth from fragmentation, not from objects kept
    d = diagnose_text("Memory keeps increasing because of fragmentation; expandable_segments fixes it.")
    assert d.cause == "allocator-fragmentation"


# ---------------------------------------------------------------- a KV cache stuck full


def test_a_kv_cache_full_with_a_stalled_server_is_the_pool_running_out() -> None:
    # full alone is normal (the scheduler preempts and resumes); full and nothing generated is the pool exhausted
    d = diagnose_text("GPU KV cache usage reaches 100% and then the model stops generating anything.")
    assert d.cause == "kv-pool-exhausted-runtime"
    assert d.phase == "serving"


def test_a_kv_cache_held_full_for_hours_after_the_load_is_a_leak() -> None:
    # full long after the requests ended: blocks are not given back
    d = diagnose_text("KV cache usage stuck near 100% for hours after the load, only a restart clears it")
    assert d.cause == "memory-leak"


@pytest.mark.parametrize(
    "text",
    [
        "What happens when GPU KV cache usage reaches 100%?",
        "INFO 01-02 03:04:05 [loggers.py:120] Engine 000: Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 99.9%",
        "What is the expected behaviour when running out of KV cache? The generation speed drops.",
    ],
)
def test_a_full_kv_cache_without_a_stall_is_no_failure(text: str) -> None:
    # a question, a metrics line, a slowdown: the scheduler preempting is how a full pool is meant to behave
    assert diagnose_text(text).cause == "no-failure"


def test_a_prompt_larger_than_the_whole_kv_pool_stalls_the_server() -> None:
    # no preemption can make room for one prompt larger than every block together
    d = diagnose_text("The server stalls when a prompt needs more than the GPU blocks * block_size.")
    assert d.cause == "kv-cache-too-small-for-max-model-len"
    assert diagnose_text("A prompt can be longer than the GPU blocks of one request.").cause == "no-failure"


# ---------------------------------------------------------------- shared memory


def test_a_container_out_of_shared_memory_is_shm() -> None:
    # Docker's default /dev/shm is 64 MB; NCCL, torch workers and split-tensor modes place buffers there
    for text in ("Container running out of shared memory with tensor split", "it crashed until I raised shm_size"):
        d = diagnose_text(text)
        assert d.cause == "host-shm-exhausted", text
    assert diagnose_text("You may need to increase shm_size for docker.").cause == "no-failure"


# ---------------------------------------------------------------- the generic vocabulary's report wordings


@pytest.mark.parametrize(
    "text",
    [
        "Qwen2.5-72B OOMs on four A100s",
        "the server OOMed after ten minutes",
        "It gets oom when I send long prompts",
        "keeps ooming with a 32k context",
        "the request exceeds the available GPU memory",
        "memory usage exceeded the GPU capacity and the worker crashed",
        "the GPU ran out halfway through the batch",
        "VRAM fills up and the process crashes",
        "更新版本后启动就炸显存",
    ],
)
def test_an_oom_in_a_reports_words_is_a_failure(text: str) -> None:
    # OOM inflected, memory exceeding the card, a GPU that ran out, VRAM full next to a crash: the same failure as
    # `out of memory`, decided by the same table (low: no numbers, no phase)
    d = diagnose_text(text)
    assert d.cause not in ("no-failure", "not-oom"), text
    assert d.confidence == "low"


@pytest.mark.parametrize(
    "text",
    [
        "This change does not cause oom any more.",
        "Zoom in on the room allocation",
        "GPU memory is full: vLLM preallocates 90 % of it by design.",
        "The batch does not exceed the available GPU memory.",
        "we ran out of time for the release",
    ],
)
def test_denials_full_by_design_and_other_running_out_are_not_failures(text: str) -> None:
    # a denial, words that only contain `oom`, a card full by design without a failure, time running out
    assert diagnose_text(text).cause == "no-failure", text


def test_more_memory_than_a_previous_version_is_a_version_regression() -> None:
    # the same deployment no longer fits after a version change: the stack's own memory grew
    for text in ("vLLM 0.6.4 uses more VRAM than before and no longer starts", "it takes more GPU memory than 0.5.3"):
        d = diagnose_text(text)
        assert d.cause == "version-regression", text
        assert d.confidence == "low"
    assert diagnose_text("It does not use more memory than before.").cause == "no-failure"
    assert diagnose_text("this takes more memory than llama.cpp").cause == "no-failure"


# ---------------------------------------------------------------- the low fallback: words that name who or what


_TORCH_OOM_WITH_NUMBERS = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB "
    "of which 1.10 GiB is free. Of the allocated memory 21.90 GiB is allocated by PyTorch, and 120.00 MiB is reserved "
    "by PyTorch but unallocated."
)


def test_an_oom_after_a_version_change_with_nothing_else_is_a_version_regression() -> None:
    # no numbers, no frame, no progress line: the one fact is that the same deployment fitted before the change
    for text in ("Command-R OOM after the update, 0.0.18 works", "It OOMs now, I went back to 0.5.3"):
        d = diagnose_text(text)
        assert d.cause == "version-regression", text
        assert d.confidence == "low"
    # the counterpart: the allocator's numbers decide, whatever the words (a 2 GiB request on a full card)
    assert diagnose_text(_TORCH_OOM_WITH_NUMBERS + "\nThis started after the update.").cause != "version-regression"


def test_an_oom_on_the_one_rank_that_holds_more_is_an_imbalance() -> None:
    # every rank gets the same utilisation x total; the rank that holds more (a larger stage) runs out first
    d = diagnose_text(
        "vllm serve m -pp 3 --gpu-memory-utilization 0.95\n"
        "The last node runs out of memory while the other GPUs still have free memory (uneven layer split)."
    )
    assert d.cause == "multi-gpu-imbalance"
    values = [f.value for f in d.fixes if f.flag == "--gpu-memory-utilization"]
    assert values and float(values[0]) < 0.95
    assert diagnose_text("The last node runs out of memory.").cause != "multi-gpu-imbalance"


def test_an_oom_that_names_the_kv_pool_is_the_pool_running_out() -> None:
    # the scheduler's KV pool, not the allocator: a single request exhausts the pool and the retraction finds nothing
    d = diagnose_text("A single decode request exhausts the KV cache pool and retract_decode raises an error due to OOM.")
    assert d.cause == "kv-pool-exhausted-runtime"
    assert d.phase == "serving"


# ---------------------------------------------------------------- a traceback cut right after the KV blocks


def _v0_cut_after_blocks(max_seq_len: int, gpu_blocks: int) -> str:
    # vLLM 0.3's engine config line and block count, then a traceback the paste cut before its exception line
    return "\n".join(
        [
            "INFO 01-02 03:04:05 llm_engine.py:72] Initializing an LLM engine with config: model='/m/chat-4b', "
            f"dtype=torch.bfloat16, max_seq_len={max_seq_len}, tensor_parallel_size=1, enforce_eager=True, seed=0)",
            f"INFO 01-02 03:04:11 llm_engine.py:322] # GPU blocks: {gpu_blocks}, # CPU blocks: 512",
            "Traceback (most recent call last):",
            '  File "/srv/worker.py", line 290, in <module>',
            "    engine = AsyncLLMEngine.from_engine_args(engine_args)",
        ]
    )


def test_a_traceback_cut_after_fewer_block_tokens_than_the_context_is_the_context_check() -> None:
    # vLLM V0 checks right after `# GPU blocks` that one max-length sequence fits in the blocks (16 tokens each by
    # default): 1,800 x 16 = 28,800 tokens < 32,768, so the cut traceback is that check, and the fix caps the context
    d = diagnose_text(_v0_cut_after_blocks(32768, 1800))
    assert d.cause == "kv-cache-too-small-for-max-model-len"
    assert d.phase == "kv-alloc"
    assert [f.value for f in d.fixes if f.flag == "--max-model-len"] == ["28800"]
    # the counterpart: the blocks hold the whole context, so the cut traceback says nothing about memory
    assert diagnose_text(_v0_cut_after_blocks(16384, 1800)).cause != "kv-cache-too-small-for-max-model-len"


# ---------------------------------------------------------------- more report wordings: kills, fits, sizes


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        # zsh prints `killed` for a job SIGKILL ended (usually the kernel's OOM killer)
        ("zsh: killed     python -m vllm.entrypoints.openai.api_server --model m", "host-oom-killer"),
        ("[1]    12345 killed     python serve.py", "host-oom-killer"),
        # killed while the checkpoint is read into host RAM
        ("the process got killed while loading the model", "host-oom-killer"),
        # a model that does not fit names the weights as the owner that fills the card
        ("the model does not fit in VRAM", "weights-do-not-fit"),
        ("this model is too large for the GPU", "weights-do-not-fit"),
    ],
)
def test_kills_and_models_that_do_not_fit_are_failures(text: str, cause: str) -> None:
    d = diagnose_text(text)
    assert d.cause == cause
    assert d.confidence == "low"


@pytest.mark.parametrize(
    "text",
    [
        "not enough space on the GPU for the second replica",
        "the engine requires 30 GiB but only 20 GiB is available",
        "it needs more memory than my 24GB card has",
    ],
)
def test_sizes_beyond_the_card_are_gpu_memory_failures(text: str) -> None:
    assert diagnose_text(text).cause not in ("no-failure", "not-oom"), text


@pytest.mark.parametrize(
    "text",
    [
        "The 8B model fits on one GPU.",
        "If the model does not fit in VRAM, use -tp 2.",
        "I killed the server while loading to change flags",
        "The window is too big for the screen",
    ],
)
def test_fits_advice_and_a_kill_by_hand_are_not_failures(text: str) -> None:
    assert diagnose_text(text).cause == "no-failure", text


# ---------------------------------------------------------------- cost: no failure key on a serving log's routine lines


def test_no_failure_signature_is_keyed_on_a_serving_logs_routine_lines() -> None:
    # the key phrases are searched over the whole log: a failure key inside the metrics or access lines that a serving
    # log prints every few seconds would send every such line through the patterns (a KV-stall key of `KV cache usage`
    # once made a 32 MiB log eight times slower)
    from vramctl.diagnose import load_catalogue

    routine = [
        "INFO 11-30 09:00:05 [loggers.py:118] Engine 000: Avg prompt throughput: 4793.1 tokens/s, Avg generation "
        "throughput: 2115.5 tokens/s, Running: 78 reqs, Waiting: 0 reqs, GPU KV cache usage: 72.2%, Prefix cache hit "
        "rate: 18.6%",
        "INFO 07-28 06:40:59 [metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 239.2 "
        "tokens/s, Running: 8 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 91.2%, CPU KV cache usage: 0.0%.",
        'INFO:     10.0.132.248:43268 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "[2026-01-02 03:04:05] Decode batch. #running-req: 12, #token: 20480, token usage: 0.31, gen throughput (token/s): 900.1",
    ]
    keyed = [
        (sig.id, key)
        for sig in load_catalogue().signatures
        if sig.kind == "failure"
        for key in sig.keys
        for line in routine
        if key in line
    ]
    assert keyed == []


# ---------------------------------------------------------------- OOM next to Chinese text, memory that blows up


@pytest.mark.parametrize(
    "text",
    [
        "启动就OOM了",  # `OOM` between CJK characters, which are word characters to a regex's \b
        "出现OOM报错",
        "CUDA内存不足",  # CUDA's 内存 is the GPU's, not the host's
        "推理时显存占满然后崩溃",  # VRAM full, then a crash
        "GPU memory explodes after a few requests",
        "memory usage spikes and the server crashes",
        "it eats all the GPU memory and crashes",
        "GPU memory exhausted",
        "VRAM usage at 100% and the app freezes",
    ],
)
def test_gpu_memory_that_blows_up_is_a_gpu_failure(text: str) -> None:
    d = diagnose_text(text)
    assert d.cause not in ("no-failure", "not-oom", "host-oom-killer"), text


def test_host_memory_that_blows_up_is_the_hosts() -> None:
    assert diagnose_text("加载权重时内存爆了").cause == "host-oom-killer"


@pytest.mark.parametrize(
    "text",
    [
        "vLLM启动后显存占满是正常的吗",  # VRAM full after start-up: vLLM's preallocation, a question
        "vLLM takes all the GPU memory, is this expected?",
        "GPU usage at 100% during the benchmark",
        "a latency spike at startup",
        "echo 1000 > /proc/1/OOM_SCORE_ADJ",
    ],
)
def test_full_by_design_and_other_spikes_are_not_failures(text: str) -> None:
    assert diagnose_text(text).cause == "no-failure", text


# ---------------------------------------------------------------- a report's words never outrank the engine's message


def test_a_title_in_words_far_above_the_engines_own_failure_does_not_take_the_root() -> None:
    # an issue title ("memory leak") on top of a pasted log whose engine message sits hundreds of lines below: the
    # engine's own failure, placed by its frame, is the root; the title's reading is listed among the other failures
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 "
        "GiB of which 1.10 GiB is free. Of the allocated memory 21.90 GiB is allocated by PyTorch, and 120.00 MiB is "
        "reserved by PyTorch but unallocated."
    )
    body = [f"INFO 01-02 03:04:{i % 60:02d} [loggers.py:1] request {i} finished" for i in range(300)]
    log = "\n".join(
        [
            "[Bug]: GPU memory keeps increasing",
            "INFO 01-02 03:04:05 [gpu_model_runner.py:1] Capturing CUDA graphs",
            *body,
            "Traceback (most recent call last):",
            '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 1, in capture_model',
            oom,
        ]
    )
    d = diagnose_text(log)
    assert d.cause == "cuda-graph-capture-oom"
    assert "memory-leak" in [o.cause for o in d.other_failures]
    # alone, the words are the failure
    assert diagnose_text("\n".join(["[Bug]: GPU memory keeps increasing", *body])).cause == "memory-leak"


def test_words_in_the_same_incident_never_outrank_the_engines_message() -> None:
    # the title right above SGLang's own retraction message (a catalogued failure lighter than the words' weight): the
    # engine's message decides; against the generic vocabulary alone ("... leads to GPU OOM") the words decide, as
    # they say more than "memory ran out"
    log = "\n".join(
        [
            "[Bug]: GPU memory keeps increasing under load",
            "[2026-01-02 03:04:05] Decode batch. #running-req: 96, #token: 180000, token usage: 0.99",
            "[2026-01-02 03:04:06] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4 -> 0.7",
        ]
    )
    d = diagnose_text(log)
    assert d.cause == "kv-pool-exhausted-runtime"
    assert d.confidence != "low"
    assert diagnose_text("GPU memory keeps increasing and leads to GPU OOM").cause == "memory-leak"
