"""read-log on vLLM 0.34.0's start-up lines (synthesised from the 0.34.0 format strings, not a real log).

With the extensible KV cache (the default on CUDA / ROCm from 0.34) `determine_available_memory` still logs
"Available KV cache memory", but that is the reserved capacity; the pool is sized after warm-up and graph capture
(`Memory after warmup: …`, `vllm/v1/worker/extensible_kv_cache.py:693-705`) and committed
(`Extended KV cache to %d blocks (%.2f GiB).`, `:536-540`); `GPU KV cache size` follows (`update_kv_cache_capacity`
after `finalize_extensible_kv_cache`, `vllm/v1/core/kv_cache_planning.py:1903-1905`).
"""

from __future__ import annotations

import json

import pytest

from vramctl.cli.main import main
from vramctl.core.ledger import KV_CACHE, WEIGHTS
from vramctl.core.units import GiB
from vramctl.diagnose import startup
from vramctl.diagnose.startup import startup_prefilter

H = "(EngineCore_DP0 pid=4242) "
LINES = [
    "INFO 11-20 10:00:00 [utils.py:300] vLLM server version 0.34.0",
    H + "INFO 11-20 10:00:05 [model_runner.py:700] Model loading took 14.99 GiB memory and 12.500000 seconds",
    H + "INFO 11-20 10:00:20 [gpu_worker.py:796] Available KV cache memory: 61.23 GiB",
    H + "INFO 11-20 10:00:40 [model_runner.py:1217] Graph capturing finished in 12 secs, took 0.25 GiB",
    H + "INFO 11-20 10:00:41 [extensible_kv_cache.py:693] Memory after warmup: 58.12 GiB free, 0.03 GiB committed "
    "to the KV cache, 4.95 GiB kept for transient activations (4.95 GiB allocated at peak, 0.12 GiB of torch "
    "reservation growth); 6948 KV cache blocks (54.28 GiB) fit within the requested 79.18 GiB. Torch may reserve up "
    "to 62.10 GiB.",
    H + "INFO 11-20 10:00:41 [extensible_kv_cache.py:536] Extended KV cache to 6948 blocks (54.28 GiB).",
    H + "INFO 11-20 10:00:41 [kv_cache_utils.py:1169] GPU KV cache size: 444,672 tokens, Maximum concurrency for "
    "131,072 tokens per request: 3.39x",
]


def test_the_committed_pool_not_the_reserved_capacity() -> None:
    report = startup.parse_startup_log(LINES, gpu_memory_bytes=round(79.18 * GiB))
    f = report.facts
    assert report.engine == "vllm" and report.variant == "V1"
    assert f["kv_cache"].text == "61.23 GiB"  # the reserved capacity, read but not the pool
    assert f["kv_cache_extended"].text == "54.28 GiB" and f["kv_cache_extended"].line == 6
    assert f["num_gpu_blocks"].value == 6948 and f["num_gpu_blocks"].line == 6
    assert f["free_after_warmup"].text == "58.12 GiB"
    assert f["kv_transient_reserve"].text == "4.95 GiB" and f["kv_warmup_peak"].text == "4.95 GiB"
    assert f["requested_memory"].text == "79.18 GiB"
    assert report.kv_cache_bytes is not None and round(report.kv_cache_bytes / GiB, 2) == 54.28
    assert report.kv_tokens == 444_672 and report.max_concurrency == 3.39
    ledger = report.ledger
    assert ledger is not None
    assert round(ledger.bytes_of(KV_CACHE) / GiB, 2) == 54.28
    assert round(ledger.bytes_of(WEIGHTS) / GiB, 2) == 14.99
    assert sum(t.bytes for t in ledger.terms) == ledger.capacity_bytes


def test_the_fast_filter_keeps_the_034_lines() -> None:
    pattern = startup_prefilter()
    for line in LINES[4:6]:
        assert pattern.search(line.encode()) is not None, line


def test_without_the_extended_line_the_available_line_stays_the_kv() -> None:
    # 0.34 with --no-enable-extensible-kv-cache, or a start-up cut short before the pool is committed
    report = startup.parse_startup_log(LINES[:4] + LINES[6:])
    assert report.kv_cache_bytes is not None and round(report.kv_cache_bytes / GiB, 2) == 61.23


def test_cli_table_names_the_extended_line(tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "v034.log"  # type: ignore[operator]
    log.write_text("\n".join(LINES) + "\n")
    assert main(["read-log", str(log), "--gpu", "h100-sxm", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kv_cache_bytes"] == round(54.28 * GiB)
    assert d["facts"]["kv_cache_extended"]["line"] == 6
