"""`vramctl check` reads the vLLM 0.30 → 0.33 feature flags as `plan` does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vramctl", *args], capture_output=True, text=True, timeout=120)


def test_check_and_plan_agree_on_ipc_cache(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: t\nmodel: meta-llama/Llama-3.1-8B-Instruct\ngpu: h100-sxm\nengine: vllm\nengine_version: 0.30.0\n"
        "requirements:\n  must_fit: true\nflags:\n  max-model-len: 8192\n  load-format: ipc_cache\n  enable-sleep-mode: true\n"
    )
    checked = _run("check", str(spec), "--json")
    planned = _run("plan", "meta-llama/Llama-3.1-8B-Instruct", "--engine-version", "0.30.0", "--max-model-len",
                   "8192", "--load-format", "ipc_cache", "--enable-sleep-mode", "--json")
    assert checked.returncode == planned.returncode == 1, checked.stderr + planned.stderr
    engine = json.loads(checked.stdout)["engines"][0]
    assert engine["verdict"] == json.loads(planned.stdout)["verdict"] == "gpu-util-exceeds-free-memory"
