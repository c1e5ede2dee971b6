"""vLLM's start-up check for models with Mamba layers (vllm/config/compilation.py, 0.32.0): with full CUDA graphs each
decode sequence holds one Mamba cache block, so a pool with fewer blocks than max_num_seqs stops the engine. The fix
is the block count the message prints, as `plan` gives it for the same deployment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vramctl.diagnose.classify import diagnose

MESSAGE = (
    "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (808). Each decode sequence requires one "
    "Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 808 or increase "
    "gpu_memory_utilization."
)
PREFIX = "(EngineCore_DP0 pid=7) ERROR 11-02 10:01:13 [core.py:866] "


@pytest.mark.parametrize(
    "text",
    [
        PREFIX + MESSAGE,
        # hard-wrapped at 100 columns, as issue threads paste it
        "\n".join((PREFIX + MESSAGE)[i : i + 100] for i in range(0, len(PREFIX + MESSAGE), 100)),
    ],
)
def test_mamba_blocks_below_max_num_seqs(tmp_path: Path, text: str) -> None:
    log = tmp_path / "engine.log"
    log.write_text("(EngineCore_DP0 pid=7) INFO GPU KV cache size: 646,400 tokens\n" + text + "\n")
    result = diagnose(log)
    assert result.cause == "kv-cache-too-small-for-max-model-len"
    assert result.confidence == "high"
    first = result.fixes[0]
    assert (first.flag, str(first.value)) == ("--max-num-seqs", "808")
    assert not any(f.flag == "--gpu-memory-utilization" and f.value is not None for f in result.fixes)


def test_cli_json_value_is_a_number(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text(PREFIX + MESSAGE + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "explain-oom", str(log), "--json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    fixes = json.loads(out.stdout)["fixes"]
    assert fixes[0]["flag"] == "--max-num-seqs" and fixes[0]["value"] == 808
