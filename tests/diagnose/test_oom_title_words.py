"""Memory failures told in an issue title (the titles round, issue 9: "no real failure reported as no failure").

Many reports state the failure only in their title; the log below it stops before the error, or there is none. The
titles round measured explain-oom on a corpus of real titles (scripts/eval_titles.py) and widened the words vocabulary
in general terms: more device nouns (video / graphics memory), memory said not to be available, an allocation that
fails, a bare lower-case `oom`, memory exceeded without the word "available", a process killed for memory in more
words, exit code 137, Python's `Memory Error`, growth over time in more verbs, memory "not being" released.
Proposals (feature requests, pull-request titles that add, detect or handle an OOM) and conditionals (`in case of
OOM`) are not failures.

Every text here is synthesised (never a copied title); each positive failed on the round's base, and each has a
counterpart that must stay not-a-memory-failure (a denial, a proposal, a question, a normal reading).
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text

NOT_MEMORY = {"not-oom", "no-failure"}
STARTUP = "INFO 01-02 03:04:05 [api_server.py:100] vLLM API server version 0.9.0\n"


@pytest.mark.parametrize(
    "title",
    [
        "Renderer aborts with an Out of video memory error on a 4 GB card",
        "Not enough GPU video memory available for the 13B model",
        "HIP Error: Memory not available to allocate buffer: 1048576",
        "Host memory alloc randomly fails on the second run",
        "GPU memory error after the first batch",
        "Error: exceeding GPU memory with two adapters loaded",
        "qwen3 32b tp2 oom",
        "两张卡跑 32B 模型也会oom",
    ],
)
def test_a_gpu_memory_failure_told_in_a_title_is_a_memory_failure(title: str) -> None:
    # each line on its own, and on top of a start-up line that holds no failure
    for text in (title + "\n", title + "\n" + STARTUP):
        d = diagnose_text(text)
        assert d.cause not in NOT_MEMORY, (text, d.cause)
        assert d.confidence == "low"


@pytest.mark.parametrize(
    "title",
    [
        "The inference server was killed due to full memory usage after a day",
        "vllm worker process killed while loading shards",
        "Server process kills itself after two hours",
        "Docker build ends with Error Code 137",
        "Memory Error when loading the tokenizer files",
    ],
)
def test_a_host_kill_or_host_memory_error_told_in_a_title_is_the_host(title: str) -> None:
    # a process that dies of SIGKILL with no error of its own (the kernel's or a cgroup's OOM killer), exit 137, and
    # Python's MemoryError are host memory, not the GPU's
    d = diagnose_text(title + "\n")
    assert d.cause == "host-oom-killer", d.cause
    assert d.confidence == "low"


@pytest.mark.parametrize(
    "title",
    [
        "VRAM usage rises over time while serving",
        "The server keeps consuming system RAM with each request",
        "GPU memory not being released between jobs",
    ],
)
def test_growth_or_memory_never_given_back_in_more_words_is_a_leak(title: str) -> None:
    d = diagnose_text(title + "\n")
    assert d.cause == "memory-leak", d.cause
    assert d.confidence == "low"


@pytest.mark.parametrize(
    "title",
    [
        # denials and questions
        "no oom here, only a wrong answer",
        "the request does not exceed GPU memory, yet the output is empty",
        "Renders fine: plenty of video memory left",
        "How much video memory does the 7B model need?",
        # proposals that name a memory failure without reporting one
        "Add OOM handling to the scheduler",
        "feat: detect OOM in the health check",
        "Support restarting a worker after an OOM",
        "docs: explain the OOM kill message",
        "The worker will restart in case of OOM",
        # words that contain the letters, settings, deliberate kills, hardware faults
        "zoom level resets after reload",
        "oom_score_adj is ignored for the worker",
        "process killed by the user with Ctrl-C",
        "ECC memory error reported on GPU 3",
        "VRAM usage is stable over time",
    ],
)
def test_denials_proposals_and_look_alikes_stay_not_a_memory_failure(title: str) -> None:
    d = diagnose_text(title + "\n")
    assert d.cause in NOT_MEMORY, (title, d.cause)
