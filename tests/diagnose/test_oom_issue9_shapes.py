"""Shapes of real logs that issue 9 found missed or misread, written from the engines' / runtimes' format strings
with invented numbers (no third-party log is copied): detection that cannot miss, root before consequence, facts
that decide, values that paste."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vramctl.diagnose import diagnose_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
    "of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.00 GiB memory in use. Of the "
    "allocated memory 75.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated."
)


def _cli(text: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "explain-oom", "--json", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    return out.returncode, json.loads(out.stdout)


def test_the_other_ranks_watchdog_before_the_oom_is_a_consequence() -> None:
    log = (
        "[rank1]:[E903 10:41:12.1 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600031 milliseconds before timing out.\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/usr/lib/python3/vllm/worker/model_runner.py", line 1, in execute_model\n'
        f"[rank0]: {TORCH_OOM}\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error\n"
    )
    d = diagnose_text(log)
    assert d.signature == "torch-cuda-oom" and d.cause != "not-oom"
    assert any(o.signature == "nccl-watchdog" for o in d.other_failures)


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        # Ray's raylet memory monitor (node_manager.cc), its colours escaped by syslog as `#033[`
        (
            "#033[2m#033[33m(raylet)#033[0m [2025-01-01 00:00:00] node_manager.cc:3007: 3 Workers (tasks / actors) "
            "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 1a2b, IP: "
            "10.0.0.7) over the last time period.",
            "host-oom-killer",
        ),
        # kubelet / kubectl describe pod
        (
            "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137",
            "host-oom-killer",
        ),
        # containerd / Go exec
        ("vllm-server: process exited: signal: killed", "host-oom-killer"),
        # FlashInfer's AlignedAllocator message, only its last sentence kept in a shortened paste
        ("RuntimeError: ... Increase the workspace buffer size.", "attention-workspace-overflow"),
        # vLLM's custom all-reduce CUDACHECK (csrc/custom_all_reduce.cuh): `Failed: Cuda error %s:%d '%s'`
        (
            "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'out of memory'",
            "non-torch-allocation-oom",
        ),
        # an OpenAI-compatible server's HTTP error payload carrying the engine's message
        (
            '{"object":"error","message":"'
            + TORCH_OOM
            + '","type":"InternalServerError","param":null,"code":500}',
            None,
        ),
        # a pasted, markdown-quoted log
        ("> > " + TORCH_OOM, None),
        # a message no signature knows, in a new engine's words
        ("[engine] fatal: not enough GPU memory to create the decode workspace (needed 3.2 GiB)", None),
    ],
)
def test_uncatalogued_and_wrapped_failures_are_never_no_failure(text: str, cause: str | None) -> None:
    rc, data = _cli(text + "\n")
    assert rc == 0, data
    assert data["cause"] not in ("no-failure", "not-oom")
    if cause is not None:
        assert data["cause"] == cause


def test_advice_that_mentions_memory_is_not_a_failure() -> None:
    log = (
        "INFO 11-30 09:01:02 [model_runner.py:1072] CUDA graphs can take additional 1~3 GiB memory per GPU. If you "
        "are running out of memory, consider decreasing `gpu_memory_utilization` or switching to eager mode.\n"
        "WARNING 11-30 09:01:03 [config.py:1] To avoid OOM, lower --max-num-seqs.\n"
        "INFO:     Application startup complete.\n"
    )
    rc, data = _cli(log)
    assert rc == 3 and data["cause"] == "no-failure"


def test_a_container_process_reading_of_zero_bytes_is_not_another_tenant() -> None:
    # torch prints `this process has 0 bytes memory in use` when NVML cannot see its own pid (a container):
    # the cached free blocks decide
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 3 has a total capacity of "
        "79.11 GiB of which 2.40 GiB is free. Including non-PyTorch memory, this process has 0 bytes memory in use. "
        "Of the allocated memory 50.00 GiB is allocated by PyTorch, and 3.00 GiB is reserved by PyTorch but "
        "unallocated."
    )
    assert diagnose_text(text).cause == "allocator-fragmentation"


def test_a_workspace_overflow_fix_is_a_byte_count_bigger_than_the_request() -> None:
    text = (
        "RuntimeError: Buffer overflow when allocating memory for batch_prefill_tmp_v with size 536870912 and "
        "alignment 16, but only 413138944 bytes available in AlignedAllocator. Increase the workspace buffer size.\n"
        '  File "/usr/lib/python3/vllm/v1/attention/backends/flashinfer.py", line 1, in forward\n'
    )
    d = diagnose_text(text)
    assert d.cause == "attention-workspace-overflow"
    values = {f.flag: f.value for f in d.fixes}
    assert "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE" in values
    assert int(values["VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE"] or 0) >= 2 * 536870912


def test_no_fix_value_in_any_fixture_has_thousands_separators() -> None:
    logs = sorted(p for p in (FIXTURES / "oom").glob("*.log")) + sorted(
        (FIXTURES / "oom_unseen").glob("*.log")
    )
    assert len(logs) > 50
    from vramctl.diagnose import diagnose

    numeric = 0
    for log in logs:
        for fix in diagnose(log).to_json()["fixes"]:
            value = fix["value"]
            if isinstance(value, (int, float)):
                numeric += 1
            assert not (isinstance(value, str) and re.search(r"\d,\d{3}", value)), (log.name, fix)
    assert numeric > 40


def test_the_same_answer_whatever_the_hash_seed(tmp_path: Path) -> None:
    # one line with two progress markers (a summary line): the later marker of the catalogue wins on every run
    log = tmp_path / "summary.log"
    log.write_text(
        "INFO 01-01 00:00:01 [api_server.py:1] vLLM API server version 0.9.1\n"
        "INFO 01-01 00:00:09 [gpu_worker.py:1] Model loading took 1.12 GiB memory and 16.45 seconds; "
        "Available KV cache memory: 64.45 GiB\n"
    )
    phases = set()
    for seed in ("0", "1", "2", "3"):
        out = subprocess.run(
            [sys.executable, "-m", "vramctl", "explain-oom", "--json", str(log)],
            capture_output=True,
            text=True,
            check=False,
            env={**__import__("os").environ, "PYTHONHASHSEED": seed},
        )
        phases.add(json.loads(out.stdout)["phase"])
    assert phases == {"profiling"}
