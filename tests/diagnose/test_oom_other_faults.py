"""Failures that are not the allocator's words: SIGKILL told as a signal number or an exit code, ROCm's GPU page
fault and the NVIDIA driver's Xid events. Each is an incident, so a log holding one is never "no failure" (exit 3).

Every log here is synthesised from the cited wordings (own numbers); none is copied from a thread.
"""

from __future__ import annotations

import pytest

from vramctl.diagnose import diagnose_text

VLLM_V1_WAIT = (  # vllm/v1/engine/utils.py `wait_for_engine_startup`: the engine cores' exit codes
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{'EngineCore_DP0': {code}}}"
)


@pytest.mark.parametrize(
    "line",
    [
        VLLM_V1_WAIT.format(code=-9),
        "(RayWorkerWrapper pid=812) worker died with signal 9",
        "supervisor: vllm-server terminated by signal 9 (SIGKILL)",
        "ERROR  process exited on signal 9",
    ],
)
def test_a_process_killed_with_signal_9_reads_as_the_oom_killer_with_low_confidence(line: str) -> None:
    # SIGKILL is the kernel OOM killer's signal, but not only its: low confidence, and the fix is on the host
    d = diagnose_text(f"INFO 01-02 10:00:00 [core.py:70] Initializing a V1 LLM engine\n{line}\n")
    assert (d.cause, d.confidence) == ("host-oom-killer", "low")
    assert any("dmesg" in f.action for f in d.fixes)


def test_an_engine_core_that_exited_with_1_is_not_the_oom_killer() -> None:
    d = diagnose_text(VLLM_V1_WAIT.format(code=1) + "\n")
    assert d.cause == "not-oom"


def test_rocm_page_fault_is_a_failure_but_not_memory_running_out() -> None:
    # ROCR-Runtime's VM-fault message: a bad address (ROCm's illegal memory access)
    d = diagnose_text(
        "Memory access fault by GPU node-2 (Agent handle: 0x55d0c8a4e2f0) on address 0x7f31c2000000. "
        "Reason: Page not present or supervisor privilege.\n"
    )
    assert (d.cause, d.confidence) == ("not-oom", "medium")
    assert any(f.flag == "AMD_SERIALIZE_KERNEL" for f in d.fixes)


@pytest.mark.parametrize(
    ("line", "xid"),
    [
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=2211, GPU has fallen off the bus.", "79"),
        ("[Tue Mar  4 10:11:12 2025] NVRM: Xid (PCI:0000:ca:00): 48, pid='<unknown>', name=<unknown>, DBE", "48"),
        ("Xid 31 (PID 1234): MMU Fault", "31"),
    ],
)
def test_an_xid_event_is_a_driver_fault(line: str, xid: str) -> None:
    d = diagnose_text(line + "\n")
    assert d.cause == "not-oom"
    assert any(xid in f.reason for f in d.fixes)


def test_a_torch_oom_outranks_the_xid_that_follows_it() -> None:
    log = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.02 GiB is free.\n"
        "NVRM: Xid (PCI:0000:3b:00): 31, pid=2211, Ch 00000010, intr 00000000. MMU Fault\n"
    )
    assert diagnose_text(log).cause not in ("not-oom", "no-failure")


def test_words_about_signal_9_are_not_a_failure() -> None:
    assert diagnose_text("the signal 9 handler was installed for the launcher\n").cause == "no-failure"


@pytest.mark.parametrize(
    "line",
    [
        "Aborted (core dumped)",
        "terminate called without an active exception",
        "ERROR 01-02 10:00:00 [core_client.py:300] Engine core proc EngineCore_0 died unexpectedly, shutting down client.",
        "ERROR 01-02 10:00:00 [async_llm_engine.py:60] Engine loop has died",
        "vllm-server.service: Main process exited with code 1",
        "ERROR:    Application startup failed. Exiting.",
        "FATAL: the launcher gave up",
    ],
)
def test_a_process_that_ended_in_failure_is_an_incident_but_not_memory(line: str) -> None:
    # exit 3 ("no failure") is for a log without an incident: these end a run, and say nothing of memory
    d = diagnose_text(f"INFO 01-02 09:59:00 [api_server.py:1000] vLLM API server version 0.9.1\n{line}\n")
    assert (d.cause, d.confidence) == ("not-oom", "low")


@pytest.mark.parametrize("line", ["Exited with code 0", "exit status 0"])
def test_a_clean_exit_is_no_failure(line: str) -> None:
    assert diagnose_text(line + "\n").cause == "no-failure"


def test_a_memory_failure_outranks_the_abort_that_follows_it() -> None:
    log = "RuntimeError: CUDA error: out of memory\nterminate called after throwing an instance of 'c10::Error'\nAborted (core dumped)\n"
    assert diagnose_text(log).cause not in ("not-oom", "no-failure")


@pytest.mark.parametrize(
    "line",
    [
        "the GPU ran out of VRAM while loading",
        "[ERROR] failed to allocate 4294967296 bytes on device 0",
        "hipMalloc failed for the weight buffer",
        "cudaMallocAsync failed: an allocation could not be served",
    ],
)
def test_gpu_memory_in_other_words_is_a_memory_failure(line: str) -> None:
    d = diagnose_text(line + "\n")
    assert d.cause not in ("not-oom", "no-failure") and d.confidence == "low"


def test_memory_pressure_capitalised_is_the_host() -> None:
    assert diagnose_text("Memory pressure detected on the node: evicting pods\n").cause == "host-oom-killer"


K8S_DESCRIBE = """\
Containers:
  vllm:
    Args:
      --model
      meta-llama/Llama-3.1-8B-Instruct
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
    Limits:
      memory:          {limit}
      nvidia.com/gpu:  1
    Requests:
      memory:          8Gi
"""


@pytest.mark.parametrize(("limit", "value"), [("16Gi", "24Gi"), ("20480Mi", "30Gi"), ("7.5Gi", "12Gi")])
def test_a_container_killed_at_its_limit_gets_a_larger_limit(limit: str, value: str) -> None:
    # the cgroup limit is what the OOM kill enforced: the fix is that limit, raised (the request below it is not it)
    d = diagnose_text(K8S_DESCRIBE.format(limit=limit))
    assert d.cause == "host-oom-killer"
    assert ("resources.limits.memory", value) in [(f.flag, f.value) for f in d.fixes]


def test_a_manifest_limit_is_read_too() -> None:
    log = 'sglang-0   0/1   OOMKilled   3   10m\n    resources:\n      limits:\n        memory: "12288Mi"\n'
    assert ("resources.limits.memory", "18Gi") in [(f.flag, f.value) for f in diagnose_text(log).fixes]


def test_a_memory_setting_inside_a_sentence_is_not_a_limit() -> None:
    log = "Reason: OOMKilled\nthe GPU memory: 80Gi is plenty\n"
    assert all(f.flag != "resources.limits.memory" for f in diagnose_text(log).fixes)
