"""read-log records the sampler and custom all-reduce lines vLLM logs, and `--compare-plan` plans a log whose
version only its wordings bound at the newest version of that range."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vramctl.diagnose.startup import _version_in_range, parse_startup_log, settings_from_report

LINES = [
    "(EngineCore_0 pid=1) INFO 08-20 18:04:01 [topk_topp_sampler.py:50] Using FlashInfer for top-p & top-k "
    "sampling.",
    "(EngineCore_0 pid=1) WARNING 08-20 18:04:01 [custom_all_reduce.py:85] Custom allreduce is disabled because "
    "it's not supported on more than two PCIe-only GPUs.",
    "(EngineCore_0 pid=1) INFO 08-20 18:04:10 [gpu_model_runner.py:2007] Model loading took 65.9651 GiB and "
    "12.799889 seconds",
    "(EngineCore_0 pid=1) INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: 2.14 GiB",
]


def test_sampler_and_all_reduce_lines_reach_the_plan_settings() -> None:
    report = parse_startup_log(LINES)
    settings = settings_from_report(report)
    assert settings.flashinfer_sampler is True
    assert settings.disable_custom_all_reduce is True


def test_a_pytorch_fallback_line_says_no_flashinfer() -> None:
    line = (
        "INFO 04-12 08:21:19 [topk_topp_sampler.py:63] FlashInfer is available, but it is not enabled. Falling back "
        "to the PyTorch-native implementation of top-p & top-k sampling."
    )
    assert settings_from_report(parse_startup_log([line, *LINES[2:]])).flashinfer_sampler is False


def test_a_version_range_is_planned_at_its_newest() -> None:
    assert _version_in_range(">=0.8.5,<=0.11.x", "V1") == "0.11.0"
    assert _version_in_range(">=0.6.5,<=0.10.0", "V0") == "0.7.3"  # V0 wordings past 0.7: the V0 rules
    assert _version_in_range("<=0.7.x", "V0") == "0.7.0"
    assert _version_in_range(">=0.12.0", None) is None
    assert _version_in_range(None, None) is None


def test_read_log_json_shows_the_settings(tmp_path: Path) -> None:
    log = tmp_path / "start.log"
    log.write_text("\n".join(LINES) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "vramctl", "read-log", str(log), "--json"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    settings = json.loads(proc.stdout)["settings"]
    assert settings["flashinfer_sampler"] is True and settings["disable_custom_all_reduce"] is True
