"""Session 9, development residuals: a log that holds an incident is never "no failure" (issue 9).

Each mechanism has a test that failed before this round and a counterpart whose answer must not change. Texts are
synthesised in the engines' and tools' formats (no third-party log text).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.diagnose.catalogue import load_catalogue
from vramctl.diagnose.classify import diagnose_text

# --------------------------------------------------------------------------------------------------------------
# 1. A report's title says something failed, and nothing in the log names memory: not-oom (low), exit 0


@pytest.mark.parametrize(
    "text",
    [
        "[Bug] CUDA graph capture fails on a B200\nThe newest image still shows it:\n"
        "python3 -m sglang.launch_server --model /models/m --tp 8 --mem-fraction-static 0.8\n",
        "[Bug] Transfer engine memory registration failed\n"
        "I0101 10:00:00.000001  1234 rdma_context.cpp:125] RDMA device: mlx5_0, LID: 1\n",
        "the local model cannot start in the cluster manager, it stays pending\n"
        "vllm serve works by hand with the same flags\n",
        "Server crashes right after the first request\nlogs:\nINFO 01-01 10:00:00 [api_server.py:1] Started\n",
        # slowness is a failure that is not memory (the labels' `not-oom`), not "no failure"
        "Inference is very slow with tensor parallel 2\nthroughput drops to 3 tokens/s\n",
        "tp>=2 时推理速度很慢\n## 环境\n",
        # an error's own idiom in a title (a duplicate, a missing or unsupported thing, a mismatch)
        "[Bug]: prefix cache: request id already exists\nINFO 01-01 10:00:00 [metrics.py:1] Running: 4 reqs\n",
        "Model architecture FooForCausalLM not supported\nvllm serve /models/foo\n",
    ],
)
def test_title_failure_words_are_an_incident(text: str) -> None:
    result = diagnose_text(text)
    assert result.cause == "not-oom"
    assert result.confidence == "low"
    assert result.signature == "told-failure-words"
    assert result.what


@pytest.mark.parametrize(
    "text",
    [
        # a question, a denial, advice: no incident stated
        "What happens when the KV cache fails to hold a request?\nI am wondering how preemption works.\n",
        "The server runs without any error, only slowly\nINFO 01-01 10:00:00 [api_server.py:1] Started\n",
        "If the download fails, retry with a token\nsome notes\n",
        "Why is the first request slow?\nI see 2 s of latency\n",
        "Is FooForCausalLM not supported yet?\nthanks\n",
        # failure words in a log's own records below ERROR (a harmless retry) and further down a report
        "INFO 01-01 10:00:00 [loader.py:1] Failed to import an optional kernel, falling back\n",
        "LMCache not offloading to CPU\nline two\nline three\nthe earlier attempt failed for another reason\n",
    ],
)
def test_no_incident_stays_no_failure(text: str) -> None:
    assert diagnose_text(text).cause == "no-failure"


def test_cli_exits_0_for_a_failure_told_in_a_title(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    told = tmp_path / "told.log"
    told.write_text("[Bug]: speculative decoding fails with a draft model\nvllm serve m --speculative-config x\n")
    clean = tmp_path / "clean.log"
    clean.write_text("INFO 01-01 10:00:00 [api_server.py:1] Application startup complete.\n")
    assert main(["explain-oom", str(told)]) == 0
    assert main(["explain-oom", str(clean)]) == 3
    capsys.readouterr()


# --------------------------------------------------------------------------------------------------------------
# 2. A record logged at ERROR (or a failed test) whose message no signature reads: not-oom, the weakest of all


@pytest.mark.parametrize(
    "text",
    [
        "INFO 01-01 10:00:00 [api_server.py:1] starting\n"
        "ERROR 01-01 10:00:01 [serving_chat.py:2] the frobnicator could not be reached\n",
        "ERROR:root:could not reach the scheduler\n",
        "[2025-01-01 10:00:00 TP0] ERROR the router lost its connection\n",
        "collected 3 items\nFAILED tests/test_engine.py::test_generate - AssertionError\n",
    ],
)
def test_error_records_are_an_incident(text: str) -> None:
    result = diagnose_text(text)
    assert result.cause == "not-oom"
    assert result.signature == "error-log-line"


def test_an_error_word_inside_an_info_record_is_no_incident() -> None:
    text = "INFO 01-01 10:00:00 [metrics.py:1] ERROR_RATE is 0 over the last minute\n"
    assert diagnose_text(text).cause == "no-failure"


def test_a_traceback_logged_at_error_is_still_read_from_its_frames() -> None:
    prefix = "(Worker_TP0 pid=9) ERROR 01-01 10:00:00 [multiproc_executor.py:1] "
    frames = [
        "WorkerProc hit an exception.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/site-packages/vllm/v1/executor/multiproc_executor.py", line 9, in worker_busy_loop',
        "    output = func(*args, **kwargs)",
        '  File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_worker.py", line 500, in compile_or_warm_up_model',
        "    self.model_runner.capture_model()",
        '  File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_model_runner.py", line 3000, in capture_model',
        "    self._capture_cudagraphs(",
    ]
    result = diagnose_text("".join(prefix + line + "\n" for line in frames))
    assert result.cause == "cuda-graph-capture-oom"
    assert result.signature != "error-log-line"


def test_an_error_record_never_outranks_a_memory_failure() -> None:
    text = (
        "ERROR 01-01 10:00:00 [core.py:1] the health check timed out\n"
        + "INFO 01-01 10:00:01 [core.py:1] step\n" * 200
        + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.00 GiB is free.\n"
    )
    assert diagnose_text(text).cause != "not-oom"


# --------------------------------------------------------------------------------------------------------------
# 3. A bare `Exception: …` / `Error: …` line is an exception


@pytest.mark.parametrize(
    "text", ["Exception: Connection refused while contacting the server\n", "Error: could not find config.json\n"]
)
def test_bare_exception_lines(text: str) -> None:
    result = diagnose_text(text)
    assert result.cause == "not-oom" and result.signature == "python-exception"


def test_a_counter_named_errors_is_no_exception() -> None:
    assert diagnose_text("Requests: 10, Errors: 0\n").cause == "no-failure"


# --------------------------------------------------------------------------------------------------------------
# 4. A title's kill with its subject left out is a host kill


def test_kill_in_a_title_without_its_subject() -> None:
    result = diagnose_text("always be killed when building the engine\nI tried two models, same thing\n")
    assert result.cause == "host-oom-killer"


def test_a_kill_that_may_happen_is_advice() -> None:
    assert diagnose_text("the process may be killed when the host is busy\nnotes\n").cause == "no-failure"


# --------------------------------------------------------------------------------------------------------------
# 5. The failure words change no other answer: a keyless line still goes to the source inventory


def test_failure_words_do_not_hide_the_inventory() -> None:
    assert diagnose_text("NCCL WARN Failed to CUDA host alloc 33554432 bytes\n").cause != "not-oom"
    assert diagnose_text("NCCL WARN Failed to CUDA host alloc 33554432 bytes\n").found_failure


def test_told_only_keys_are_used_by_nothing_else() -> None:
    from vramctl.diagnose.classify import told_only_keys

    cat = load_catalogue()
    only = told_only_keys(cat)
    assert "fail" in only and "crash" in only
    assert not only & set(cat.keys_to_signatures)
    assert not only & {word for words in cat.hints.values() for word in words}


# --------------------------------------------------------------------------------------------------------------
# 6. Weights the model's name states that fill nine tenths of the budget leave nothing for activations and a KV cache


def _named_log(tmp_path: Path, billions: int) -> Path:
    log = tmp_path / f"named{billions}.log"
    log.write_text(
        f"[Bug]: Foo-{billions}B OOM on 2 A100 80G\n- GPU type: NVIDIA A100-SXM4-80GB\n- vLLM version: 0.8.4\n"
        f"vllm serve /models/Org/Foo-{billions}B --tensor-parallel-size 2 --gpu-memory-utilization 0.95 "
        "--max-model-len 4096\n"
        "INFO 04-17 09:40:27 [__init__.py:239] Automatically detected platform cuda.\n"
    )
    return log


def test_named_weights_filling_the_budget_do_not_fit(tmp_path: Path) -> None:
    from vramctl.diagnose.classify import diagnose

    result = diagnose(_named_log(tmp_path, 75))  # 75 GB per rank of a 0.95 x 79 GiB budget
    assert result.cause == "weights-do-not-fit" and result.confidence == "low"
    assert any(f.flag == "--tensor-parallel-size" and f.value for f in result.fixes)


def test_named_weights_with_room_left_keep_the_wordings_answer(tmp_path: Path) -> None:
    from vramctl.diagnose.classify import diagnose

    assert diagnose(_named_log(tmp_path, 65)).cause == "activation-spike"  # 81 % of the budget: a close call


# --------------------------------------------------------------------------------------------------------------
# 7. torch's warning that this build ignores expandable segments: the fragmentation fix it does read

_FRAGMENTED = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.99 GiB "
    "of which 1.00 GiB is free. Of the allocated memory 16.00 GiB is allocated by PyTorch, and 5.00 GiB is reserved by "
    "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
)


def test_fragmentation_on_a_build_without_expandable_segments() -> None:
    warning = (
        "[W1001 01:18:06.108184462 CUDAAllocatorConfig.h:28] Warning: expandable_segments not supported on this "
        "platform (function operator())\n"
    )
    result = diagnose_text(warning + _FRAGMENTED)
    assert result.cause == "allocator-fragmentation"
    assert result.fixes[0].value == "max_split_size_mb:128"
    assert all(f.value != "expandable_segments:True" for f in result.fixes)


def test_fragmentation_keeps_expandable_segments_without_the_warning() -> None:
    result = diagnose_text(_FRAGMENTED)
    assert result.cause == "allocator-fragmentation"
    assert result.fixes[0].value == "expandable_segments:True"


def test_the_warning_alone_is_no_failure() -> None:
    text = "[W1001 01:18:06.108184462 CUDAAllocatorConfig.h:28] Warning: expandable_segments not supported on this platform\n"
    assert diagnose_text(text).cause == "no-failure"


_STARTED = (
    "INFO 01-01 10:00:01 [core.py:71] Initializing a V1 LLM engine (v0.10.0) with config: model='m'\n"
    "INFO 01-01 10:00:30 [gpu_model_runner.py:1800] Model loading took 15.6 GiB and 20.1 seconds\n"
    "INFO 01-01 10:01:00 [api_server.py:1400] Starting vLLM API server on http://0.0.0.0:8000\n"
)


@pytest.mark.parametrize(
    "first",
    [
        # a program's own first lines, whose failure words state no failure (review of session 9)
        "Using a slow image processor as `use_fast` is unset and a slow processor was saved with this model.\n",
        "/usr/lib/python3/site-packages/torch/cuda/__init__.py:230: UserWarning: TF32 is not supported here\n"
        "  warnings.warn(\n",
        "$ vllm serve m --uvicorn-log-level error --max-model-len 8192\n",
        "export VLLM_LOGGING_LEVEL=ERROR\n",
        "Successful requests: 100, Failed requests: 0\n",
        # an engine's settings dump: SGLang's ServerArgs field `crash_dump_folder`, vLLM's Namespace / non-default args
        "[2025-07-01 10:00:00] server_args=ServerArgs(model_path='m', watchdog_timeout=300, crash_dump_folder=None)\n",
        "INFO 01-01 10:00:00 [utils.py:1] non-default args: {'model': 'm', 'fail_on_unknown': True}\n",
        "Namespace(model='m', crash_on_error=False)\n",
    ],
)
def test_a_programs_first_lines_are_no_report(first: str) -> None:
    """A clean start whose first lines are a program's (a warning, a command's log level, a zero count) holds no
    incident: "no failure", exit 3, as before the words_failed rule."""
    assert diagnose_text(first + _STARTED).cause == "no-failure"


def test_a_report_after_a_programs_line_is_still_read() -> None:
    """The program's line leaves the title hint free for a person's words on the next lines."""
    text = "Using a slow image processor as `use_fast` is unset\nServer crashes right after the first request\n"
    assert diagnose_text(text).signature == "told-failure-words"


@pytest.mark.parametrize("kind", ["shape", "size", "dimension", "dtype"])
def test_a_shape_check_in_a_title_is_an_incident(kind: str) -> None:
    """dev12's shape-check words (`not_memory_words`: `shape mismatch`, …) must not hide the `mismatch` of this
    round's title words: the key scan takes the longest phrase at each place (review of session 9)."""
    result = diagnose_text(f"[Bug] {kind} mismatch when loading the checkpoint\nvllm serve m --tp 2\n")
    assert result.cause == "not-oom"
    assert result.signature == "told-failure-words"


def test_no_catalogue_phrase_hides_a_title_word() -> None:
    """A hint or marker phrase that holds a title failure word (`Failed to load`, `Cuda error`, `EngineCore
    encountered a fatal error`) is taken whole by the key scan: in a title it must still state an incident, like the
    word alone. Denials and torch's expandable-segments warning state none (review of session 9)."""
    cat = load_catalogue()
    words = cat.global_hints["words_failed"]
    phrases = set(cat.marker_phrases) | set(cat.settings_keys) | set(cat.method_keys)
    phrases |= {key for version in cat.versions for key in version.keys}
    phrases |= {word for name, group in (*cat.hints.items(), *cat.global_hints.items()) for word in group
                if name != "words_failed"}
    no_incident = {"no error message", "without any error", "expandable_segments not supported"}
    hidden = []
    for phrase in sorted(phrases - set(cat.keys_to_signatures) - set(words) - no_incident):
        title = f"[Bug] {phrase} when loading\nvllm serve m --tp 2\n"
        if any(word in phrase for word in words) and diagnose_text(title).cause == "no-failure":
            hidden.append(phrase)
    assert hidden == []


@pytest.mark.parametrize(
    "first",
    [
        # torch c10's glog-style warning at a multi-GPU start (` hang` is a stall word)
        "[rank0]:[W1203 10:00:00.000000 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 0] using GPU 0 to perform "
        "barrier as devices used by this process are currently unknown. This can potentially cause a hang if this "
        "rank to GPU mapping is incorrect.\n",
        "WARNING 01-01 10:00:00 [utils.py:1] The server may hang if the frontend runs in the engine's process\n",
        "INFO 01-01 10:00:00 [utils.py:1] Cannot load the optional kernel; using the fallback\n",
    ],
)
def test_start_and_stall_words_in_a_log_record_are_no_report(first: str) -> None:
    """Start-up and stall words (`words_start_died`, `words_stall`) in a log's own record below ERROR, glog's `[W…]`
    included, are no report's words: a clean start stays "no failure" (review of session 9)."""
    assert diagnose_text(first + _STARTED).cause == "no-failure"


@pytest.mark.parametrize(
    "title", ["the server is stuck after start", "Server hangs after the first request", "the UI freezes on load"]
)
def test_stall_words_in_a_title_are_an_incident(title: str) -> None:
    """`words-kv-cache-stall`'s keys (` stuck`, ` hangs`, ` freez`) are taken whole at the space before the word: the
    stall words of `words_stall` list them too, so a stall told without a full KV cache is still an incident
    (`not-oom`, low), as docs/explain-oom.md says (review of session 9)."""
    result = diagnose_text(title + "\n" + _STARTED)
    assert result.cause == "not-oom"
    assert result.signature == "told-failure-words"


def test_a_gguf_block_type_in_the_name_is_not_sized_at_16_bits(tmp_path: Path) -> None:
    """`Foo-75B-Q4_K_M` is a ~4.8-bit GGUF file, not 16-bit weights: the name sizes nothing (review of session 9; the
    nine-tenths rule read it as 69.85 GiB per rank)."""
    from vramctl.diagnose.classify import diagnose
    from vramctl.diagnose.namedsize import bytes_per_param

    for name in ("Org/Foo-75B-Q4_K_M", "Org/Foo-75B-Q8_0", "Org/Foo-7B-IQ4_XS.gguf"):
        assert bytes_per_param(name) is None, name
    log = _named_log(tmp_path, 75)
    log.write_text(log.read_text().replace("Foo-75B", "Foo-75B-Q4_K_M"))
    assert diagnose(log).cause != "weights-do-not-fit"
