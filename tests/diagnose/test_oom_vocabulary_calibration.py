"""explain-oom, issue 9 session 2: vocabulary that cannot miss, the full-card rule of the memory model, calibration
of the sampler warm-up, phases placed by the serving loop. Every log here is hand-written (no third-party text)."""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text, load_catalogue
from vramctl.diagnose.decide import FactRecord, decide
from vramctl.diagnose.facts import compile_expression, evaluate

GiB = 1 << 30
MiB = 1 << 20


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("ERROR: failed to allocate 4096 MiB of device memory", None),
        ("RuntimeError: Insufficient GPU memory to load the model.", None),
        ("fatal: the device memory is insufficient for this request", None),
        # Ollama's own start-up check (llm/server.go): it refuses to load, nothing is killed (dev8 round)
        ("Error: model requires more system memory (5.3 GiB) than is available (3.5 GiB)", "weights-do-not-fit"),
        (
            "RuntimeError: [enforce fail at alloc_cpu.cpp:114] DefaultCPUAllocator: not enough memory",
            "host-oom-killer",
        ),
        ("[Bug]: server OOM with a 32B model on two cards", None),
        ("my-server.service: Failed with result 'oom-kill'.", "host-oom-killer"),
        ("the worker was killed due to high memory usage", "host-oom-killer"),
        ("worker 3 was killed by the OOM killer", "host-oom-killer"),
        ("Error: insufficient memory to allocate the KV cache", "no-kv-cache-memory"),
    ],
)
def test_generic_memory_words_are_failures(line: str, cause: str | None) -> None:
    d = diagnose_text(line + "\n")
    assert d.cause not in ("no-failure", "not-oom"), line
    if cause is not None:
        assert d.cause == cause, (line, d.cause)


@pytest.mark.parametrize(
    "line",
    [
        "INFO: lower max_num_seqs to avoid OOM on small cards",
        "RuntimeError: CUDA error: an illegal memory access was encountered (this is not an OOM)",
        "INFO: enabled the OOM guard for the scheduler",
        "WARNING: Failed to allocate port 8000, retrying",
    ],
)
def test_words_near_memory_that_are_not_failures(line: str) -> None:
    assert diagnose_text(line + "\n").cause in ("no-failure", "not-oom"), line


def test_a_shorter_key_inside_a_longer_catalogue_phrase_still_reaches_its_signature() -> None:
    cat = load_catalogue()
    generic = next(s for s in cat.signatures if s.id == "generic-host-memory")
    # `due to high memory usage` is Ray's phrase; the generic signature's own `high memory usage` sits inside it
    assert "due to high memory usage" in generic.keys
    index = cat.signatures.index(generic)
    assert index in cat.keys_to_signatures["due to high memory usage"]


def test_known_names_whether_the_log_gave_a_fact() -> None:
    expr = compile_expression("not known(gpu_memory_utilization) or gpu_memory_utilization < 0.95")
    assert evaluate(expr, {}) is True
    assert evaluate(expr, {"gpu_memory_utilization": 0.9}) is True
    assert evaluate(expr, {"gpu_memory_utilization": 0.98}) is False


def _full_card(util: float | None, engine: str | None = "vllm") -> FactRecord:
    total = 80 * GiB
    return FactRecord(
        phase=None,
        numbers={
            "total_bytes": total,
            "allocated_bytes": int(0.985 * total),
            "requested_bytes": 64 * MiB,
            "free_bytes": 40 * MiB,
        },
        settings={} if util is None else {"gpu_memory_utilization": util},
        engine=engine,
    )


def test_pytorch_holding_the_whole_card_before_a_small_request_reads_as_weights() -> None:
    # a serving engine's PyTorch allocations stay within utilisation x total; 98.5 % is beyond any default budget
    for util in (None, 0.9):
        d = decide(_full_card(util))
        assert (d.cause, d.phase, d.confidence) == ("weights-do-not-fit", "weights-load", "low")
    # with a utilisation that allows it, the full card says nothing about the phase
    assert decide(_full_card(0.98)).cause != "weights-do-not-fit"


SAMPLER = (
    "(VllmWorker rank=0 pid=11) ERROR 01-02 03:04:05 [multiproc_executor.py:600] RuntimeError: CUDA out of memory "
    "occurred when warming up sampler with 512 dummy requests. Please try lowering `max_num_seqs` or "
    "`gpu_memory_utilization` when initializing the engine.\n"
)
TORCH = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.98 GiB memory in use. "
    "Of the allocated memory 76.50 GiB is allocated by PyTorch, and 0.50 GiB is reserved by PyTorch but "
    "unallocated.\n"
)


def test_the_sampler_message_alone_is_medium_with_the_allocators_numbers_high() -> None:
    alone = diagnose_text(SAMPLER)
    assert (alone.cause, alone.confidence) == ("sampler-warmup-oom", "medium")
    both = diagnose_text(
        TORCH + "\nThe above exception was the direct cause of the following exception:\n\n" + SAMPLER
    )
    assert (both.cause, both.confidence) == ("sampler-warmup-oom", "high")


def test_a_cut_traceback_through_the_serving_loop_is_placed_in_serving() -> None:
    log = (
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:700] "
        + TORCH
        + "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:700] Traceback (most recent call last):\n"
        '(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:700]   File "/x/vllm/v1/engine/core.py", line 701, '
        "in run_engine_core\n"
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:700]     engine_core.run_busy_loop()\n"
    )
    d = diagnose_text(log)
    assert (d.cause, d.phase) == ("activation-spike", "serving")


def test_an_oom_returned_in_an_http_error_is_a_request_while_serving() -> None:
    # a card 93 % full before a 1 GiB request would read as the weights; the HTTP 500 says the server was serving
    payload = (
        "openai.InternalServerError: Error code: 500 - {'object': 'error', 'message': 'torch.OutOfMemoryError: CUDA "
        "out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 100.00 MiB is "
        "free. Of the allocated memory 22.10 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but "
        "unallocated.', 'type': 'InternalServerError', 'code': 500}\n"
    )
    d = diagnose_text(payload)
    assert (d.cause, d.phase) == ("activation-spike", "serving")
