"""SGLang's newest `--kv-cache-dtype` choices (server_args.py: auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16,
nvfp4, fp4_mx_block16, fp4_e2m1): each sized as `_compute_cell_size` sizes it, or refused in one line."""

from __future__ import annotations

import json

import pytest

from vramctl.cli.main import main
from vramctl.core.engines.sglang import pool as S
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_model

LLAMA = load_model("llama-3-8b")  # 32 layers, 8 KV heads of 128
SG = ServeSettings(engine="sglang")
VALUES = 8 * 128 * 32  # K (or V) values per token on one rank


@pytest.mark.parametrize(
    ("dtype", "cell"),
    [
        ("bf16", 2 * VALUES * 2),
        ("bfloat16", 2 * VALUES * 2),
        ("fp8_e4m3", 2 * VALUES),
        ("fp8_e5m2", 2 * VALUES),
        ("mxfp8", 2 * VALUES + 2 * VALUES // 32),  # one scale byte per 32 values
        ("nvfp4", 2 * VALUES // 2 + 2 * VALUES // 16),  # E2M1 pairs + one FP8 scale per 16 values
        ("fp4_mx_block16", 2 * VALUES // 2 + 2 * VALUES // 16),  # E2M1 pairs + one uint8 scale per 16 values
        ("fp4_e2m1", 2 * VALUES // 2 + 2 * VALUES // 16),
    ],
)
def test_cell_size_per_dtype(dtype: str, cell: int) -> None:
    assert S.cell_size(LLAMA, SG.with_changes(kv_cache_dtype=dtype)) == cell


@pytest.mark.parametrize("dtype", ["nvfp4", "fp4_mx_block16", "mxfp8"])
def test_cli_plans_the_newer_dtypes(dtype: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--model", "llama-3-8b", "--gpu", "h200", "--engine", "sglang", "--kv-cache-dtype", dtype,
                 "--json"])
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    assert data["kv_bytes_per_token"] == S.cell_size(LLAMA, SG.with_changes(kv_cache_dtype=dtype))
    assert data["settings"]["kv_cache_dtype"] == dtype


@pytest.mark.parametrize(
    ("dtype", "version", "needle"),
    [
        ("nvfp4", "0.5.18", "first release read that lists it is 0.5.20"),
        ("fp4_mx_block16", "0.5.9", "first release read that lists it is 0.5.20"),
        ("mxfp8", "0.5.9", "first release read that lists it is 0.5.18"),
        ("int8", None, "not an SGLang KV cache dtype"),
        ("int8_per_token_head", None, "not an SGLang KV cache dtype"),
    ],
)
def test_refused_in_one_line(
    dtype: str, version: str | None, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--model", "llama-3-8b", "--gpu", "h200", "--engine", "sglang", "--kv-cache-dtype", dtype]
    code = main([*args, "--engine-version", version] if version else args)
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_hybrid_refuses_block_scaled_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--model", "gpt-oss-20b", "--gpu", "h200", "--engine", "sglang", "--kv-cache-dtype",
                 "mxfp8"])
    err = capsys.readouterr().err
    assert code == 2 and "hybrid" in err and len(err.strip().splitlines()) == 1
