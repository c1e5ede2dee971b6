"""Shapes of logs found while evaluating explain-oom on real logs outside the repository (hand-written fixtures in
tests/fixtures/oom_unseen, built from the engines' format strings with invented numbers; README there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.diagnose import diagnose

UNSEEN = Path(__file__).resolve().parents[1] / "fixtures" / "oom_unseen"

CASES = [
    ("vllm_fp32_weights_no_frames.log", "weights-do-not-fit", "weights-load", "vllm"),
    ("sglang_terminal_wrapped_weights_oom.log", "weights-do-not-fit", "weights-load", "sglang"),
    ("vllm_v0_initialize_cache_after_capture_marker.log", "cuda-graph-capture-oom", "graph-capture", "vllm"),
    ("vllm_kvcached_pool_short.log", "kv-pool-exhausted-runtime", "serving", "vllm"),
    ("vllm_ray_worker_killed_after_engine_init.log", "host-oom-killer", "weights-load", "vllm"),
    ("vllm_v1_fatal_error_serving_oom.log", "activation-spike", "serving", "vllm"),
    ("vllm_gcp_export_sampler_warmup.log", "sampler-warmup-oom", "graph-capture", "vllm"),
    ("vllm_marlin_repack_driver_oom.log", "weights-do-not-fit", "weights-load", "vllm"),
]


@pytest.mark.parametrize(("name", "cause", "phase", "engine"), CASES, ids=[c[0] for c in CASES])
def test_oom_unseen_shapes(name: str, cause: str, phase: str, engine: str) -> None:
    d = diagnose(UNSEEN / name)
    assert (d.cause, d.phase, d.engine) == (cause, phase, engine)


def test_oom_torch21_capacty_typo_and_fp32_fix() -> None:
    d = diagnose(UNSEEN / "vllm_fp32_weights_no_frames.log")
    assert d.facts["total_bytes"] == round(23.65 * 2**30)
    assert d.facts["allocated_bytes"] == round(23.28 * 2**30)
    assert (d.fixes[0].flag, d.fixes[0].value) == ("--dtype", "bfloat16")


def test_oom_fp32_fix_only_when_fp32_was_asked_for(tmp_path: Path) -> None:
    text = (
        (UNSEEN / "vllm_fp32_weights_no_frames.log").read_text().replace("--dtype float ", "--dtype float16 ")
    )
    log = tmp_path / "fp16.log"
    log.write_text(text)
    d = diagnose(log)
    assert d.cause != "weights-do-not-fit" or all(f.flag != "--dtype" for f in d.fixes)


def test_oom_terminal_wrapped_numbers_are_read() -> None:
    """`of <padding> which` needs the space kept, `P <padding> yTorch` needs it dropped: both are read."""
    d = diagnose(UNSEEN / "sglang_terminal_wrapped_weights_oom.log")
    assert d.facts["total_bytes"] == round(79.19 * 2**30)
    assert d.facts["free_bytes"] == round(58.81 * 2**20)
    assert d.facts["allocated_bytes"] == round(77.84 * 2**30)
    assert d.facts["reserved_unallocated_bytes"] == round(612.40 * 2**20)


def test_oom_initialize_cache_stays_kv_alloc_without_a_capture_marker(tmp_path: Path) -> None:
    lines = (UNSEEN / "vllm_v0_initialize_cache_after_capture_marker.log").read_text().splitlines()
    log = tmp_path / "no-capture.log"
    log.write_text("\n".join(line for line in lines if "CUDA graph" not in line) + "\n")
    d = diagnose(log)
    assert d.phase == "kv-alloc" and d.cause == "kv-pool-overcommit"


def test_oom_kvcached_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    main(["explain-oom", "--json", str(UNSEEN / "vllm_kvcached_pool_short.log")])
    out = json.loads(capsys.readouterr().out)
    assert out["cause"] == "kv-pool-exhausted-runtime"
    assert out["facts"]["needed_blocks"] == 17
    assert out["fixes"][0]["flag"] == "--max-num-seqs"


def test_oom_v1_failed_to_start_is_not_serving(tmp_path: Path) -> None:
    """`EngineCore failed to start.` (the core never finished starting) must not be read as serving."""
    text = (UNSEEN / "vllm_v1_fatal_error_serving_oom.log").read_text()
    text = text.replace("EngineCore encountered a fatal error.", "EngineCore failed to start.")
    text = "\n".join(line for line in text.splitlines() if "output_handler" not in line) + "\n"
    log = tmp_path / "start.log"
    log.write_text(text)
    assert diagnose(log).phase != "serving"


def test_oom_cloud_logging_prefix_is_peeled() -> None:
    from vramctl.diagnose.reader import split_prefixes

    line = (
        "INFO 2025-08-02T09:41:31.004431007Z [resource.labels.containerName: vllm] (EngineCore_DP0 pid=188) "
        "ERROR 08-02 02:41:31 [core.py:632] torch.OutOfMemoryError: CUDA out of memory."
    )
    assert split_prefixes(line) == ("EngineCore_DP0 pid=188", "torch.OutOfMemoryError: CUDA out of memory.")
