"""Audit of issue 3 (read-log): a vLLM 0.11 start-up at DEBUG with EngineCore prefixes, ANSI colours and CRLF,
whose only total is the DEBUG `Requested memory: u (util), R GiB` line (vllm.md §4 row 8: R = u x total), and the
same log read from gzip and standard input."""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path

import pytest

from vramctl.cli.main import main

GiB = 1 << 30

# Written from vllm.md §4's format strings (rows 4, 8, 9, 10, 13 and the graph line), numbers of its own:
# requested 71.31 = 0.9 x 79.23; non-KV 16.50 = 14.99 + 1.39 + 0.12; KV 54.81 = 71.31 - 16.50.
LINES = [
    "\x1b[32mINFO\x1b[0m 10-01 10:00:00 [api_server.py:1] vLLM API server version 0.11.0",
    "(EngineCore_DP0 pid=812) DEBUG 10-01 10:00:10 [gpu_worker.py:760] Initial free memory: 78.62 GiB; "
    "Requested memory: 0.900000 (util), 71.31 GiB",
    "(EngineCore_DP0 pid=812) INFO 10-01 10:00:40 [gpu_model_runner.py:2600] Model loading took 14.9889 GiB "
    "and 6.01 seconds",
    "(EngineCore_DP0 pid=812) DEBUG 10-01 10:00:55 [gpu_worker.py:771] Memory profiling takes 9.12 seconds. "
    "Total non KV cache memory: 16.50GiB; torch peak memory increase: 1.39GiB; non-torch forward increase "
    "memory: 0.12GiB; weights memory: 14.99GiB.",
    "(EngineCore_DP0 pid=812) INFO 10-01 10:00:55 [gpu_worker.py:291] Available KV cache memory: 54.81 GiB",
    "(EngineCore_DP0 pid=812) INFO 10-01 10:00:56 [kv_cache_utils.py:1087] GPU KV cache size: 438,112 tokens",
    "(EngineCore_DP0 pid=812) INFO 10-01 10:00:56 [kv_cache_utils.py:1091] Maximum concurrency for 131,072 "
    "tokens per request: 3.34x",
    "(EngineCore_DP0 pid=812) INFO 10-01 10:01:20 [gpu_model_runner.py:3400] Graph capturing finished in 24 "
    "secs, took 0.56 GiB",
]
DATA = "\r\n".join(LINES).encode()  # CRLF, no final newline


def _check(out: dict[str, object]) -> None:
    assert out["engine"] == "vllm" and out["engine_version"] == "0.11.0" and out["variant"] == "V1"
    assert out["capacity_source"] == "derived"
    capacity = out["capacity_bytes"]
    assert isinstance(capacity, int) and abs(capacity / GiB - 71.31 / 0.9) < 0.01
    terms = out["terms"]
    assert isinstance(terms, dict)
    expected = {
        "weights": 14.99,
        "activation_peak": 1.39,
        "non_torch": 0.12,
        "cuda_graph": 0.56,
        "kv_cache": 54.81,
    }
    for name, gib in expected.items():
        assert abs(terms[name]["bytes"] / GiB - gib) < 0.006, name
        assert isinstance(terms[name]["bytes"], int)
    assert sum(t["bytes"] for t in terms.values()) == capacity  # the ledger sums
    assert out["kv_tokens"] == 438112 and out["max_concurrency"] == 3.34


def test_readlog_v011_debug_capacity_from_requested_memory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "v011.log"
    log.write_bytes(DATA)
    assert main(["read-log", str(log), "--json"]) == 0
    _check(json.loads(capsys.readouterr().out))


def test_readlog_same_log_from_gzip_and_stdin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gz = tmp_path / "v011.log.gz"
    gz.write_bytes(gzip.compress(DATA))
    assert main(["read-log", str(gz), "--json"]) == 0
    _check(json.loads(capsys.readouterr().out))

    class _Stdin(io.TextIOWrapper):
        def isatty(self) -> bool:
            return False

    monkeypatch.setattr(sys, "stdin", _Stdin(io.BytesIO(DATA)))
    assert main(["read-log", "-", "--json"]) == 0
    _check(json.loads(capsys.readouterr().out))


def test_readlog_utf16_with_bom(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "v011-utf16.log"
    log.write_bytes("\r\n".join(LINES).encode("utf-16"))
    assert main(["read-log", str(log), "--json"]) == 0
    _check(json.loads(capsys.readouterr().out))
