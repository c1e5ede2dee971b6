"""Audit of issue 2 item 3: the sliding-window per-request cap vLLM computes, by version and pipeline depth.

cap = cdiv(min(window − 1 + in_flight, max_model_len), block) + 1 with in_flight = max_concurrent_batches ×
max_num_batched_tokens (vllm.md §3.1): 1 batch in 0.11, 2 on the V1 runner at pp 1, pp at pp > 1 before 0.33,
pp + 1 on the V2 runner (0.33; the only runner from 0.34)."""

from __future__ import annotations

import json

import pytest

from vramctl.cli.main import main


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@pytest.mark.parametrize(
    ("args", "batches"),
    [
        ((), 2),
        (("-pp", "2"), 3),
        (("--engine-version", "0.26.0"), 2),
        (("--engine-version", "0.26.0", "-pp", "2"), 2),
        (("--engine-version", "0.26.0", "-pp", "4"), 4),
        (("--engine-version", "0.11.0"), 1),
    ],
)
def test_gpt_oss_window_cap(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], batches: int) -> None:
    # gpt-oss-20b: window 128 on every other layer, max_model_len 131,072, H100 server default 8,192 tokens.
    assert main(["plan", "--json", "gpt-oss-20b", *args]) == 0
    d = json.loads(capsys.readouterr().out)
    tokens = d["settings"]["max_num_batched_tokens"]
    assert tokens == 8192
    block = d["block_size"]  # 16 through 0.33, 64 from 0.34 (vllm/config/cache.py:185)
    assert block == (16 if args[:1] == ("--engine-version",) else 64)
    full = _cdiv(131_072, block)
    window = _cdiv(min(128 - 1 + batches * tokens, 131_072), block) + 1
    assert d["blocks_per_request"] == full + window
